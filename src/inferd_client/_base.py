"""The base of every typed result: declared fields as attributes, the whole JSON object kept.

Servers add fields over time and the chat endpoint is a passthrough, so a result never drops
what it did not declare: `obj["any_field"]`, `obj.get(...)`, `obj.raw` and `obj.extra` reach it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Iterator, Mapping, TypeVar

T = TypeVar("T", bound="APIObject")


@dataclasses.dataclass(kw_only=True)
class APIObject:
    """A JSON object from the API with its known fields typed."""

    # field name -> class for nested objects, and for lists of nested objects
    _nested: ClassVar[Mapping[str, type["APIObject"]]] = {}
    _nested_lists: ClassVar[Mapping[str, type["APIObject"]]] = {}
    # Python name -> JSON key, for keys that are not identifiers (`from`)
    _renamed: ClassVar[Mapping[str, str]] = {}

    raw: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        """Build from a decoded JSON object; unknown keys stay in `raw`."""
        if not isinstance(data, Mapping):
            raise TypeError(f"{cls.__name__} expects a JSON object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for spec in dataclasses.fields(cls):
            if spec.name == "raw":
                continue
            key = cls._renamed.get(spec.name, spec.name)
            if key not in data:
                continue
            value = data[key]
            if spec.name in cls._nested and isinstance(value, Mapping):
                value = cls._nested[spec.name].from_dict(value)
            elif spec.name in cls._nested_lists and isinstance(value, list):
                item_cls = cls._nested_lists[spec.name]
                value = [item_cls.from_dict(v) if isinstance(v, Mapping) else v for v in value]
            values[spec.name] = value
        return cls(raw=dict(data), **values)

    @property
    def extra(self) -> dict[str, Any]:
        """The keys this class does not declare."""
        known = {self._renamed.get(f.name, f.name) for f in dataclasses.fields(self)}
        return {k: v for k, v in self.raw.items() if k not in known}

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __contains__(self, key: object) -> bool:
        return key in self.raw

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def get(self, key: str, default: Any = None) -> Any:
        """A key of the JSON object, declared or not."""
        return self.raw.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object as the server sent it."""
        return dict(self.raw)

"""The base of every typed result: declared fields as attributes, the whole JSON object kept.

Servers add fields over time and the chat endpoint is a passthrough, so a result never drops
what it did not declare: `obj["any_field"]`, `obj.get(...)`, `obj.raw` and `obj.extra` reach it.

A subclass is a keyword-only dataclass without a decorator of its own, and its field annotations
alone say which keys hold nested objects (`Usage | None`, `list[ChatChoice]`): every result class
is then just its list of fields, said once.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, ClassVar, Generic, Iterator, Mapping, TypeVar, dataclass_transform

T = TypeVar("T", bound="APIObject")
Item = TypeVar("Item")

# one field of a class's plan for `from_dict`: Python name, JSON key, nested class, whether a list of them
_FieldPlan = tuple[str, str, "type[APIObject] | None", bool]


@dataclass_transform(kw_only_default=True, field_specifiers=(dataclasses.field,))
@dataclasses.dataclass(kw_only=True)
class APIObject:
    """A JSON object from the API with its known fields typed."""

    # Python name -> JSON key, for keys that are not identifiers (`from`)
    _renamed: ClassVar[Mapping[str, str]] = {}

    raw: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass is a keyword-only dataclass, as if decorated with `@dataclass(kw_only=True)`."""
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(kw_only=True)(cls)

    @classmethod
    def _plan(cls) -> tuple[_FieldPlan, ...]:
        """How `from_dict` fills each field, read from the annotations once per class (not per object:
        a stream decodes one object per chunk) and only when first needed, once every class that an
        annotation names exists."""
        plan: tuple[_FieldPlan, ...] | None = cls.__dict__.get("_from_dict_plan")
        if plan is None:
            # names resolve in each class's module, never in its body (a field named `type` or `bytes`)
            hints, bound = typing.get_type_hints(cls, localns={}), _bound_type_arguments(cls)
            plan = tuple((spec.name, cls._renamed.get(spec.name, spec.name), *_nested_class(hints[spec.name], bound))
                         for spec in dataclasses.fields(cls) if spec.name != "raw")
            setattr(cls, "_from_dict_plan", plan)
        return plan

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        """Build from a decoded JSON object; unknown keys stay in `raw`."""
        if not isinstance(data, Mapping):
            raise TypeError(f"{cls.__name__} expects a JSON object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for name, key, nested, is_list in cls._plan():
            if key not in data:
                continue
            value = data[key]
            if nested is not None:
                if not is_list and isinstance(value, Mapping):
                    value = nested.from_dict(value)
                elif is_list and isinstance(value, list):
                    value = [nested.from_dict(v) if isinstance(v, Mapping) else v for v in value]
            values[name] = value
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


class ListObject(APIObject, Generic[Item]):
    """A list envelope, `{object: "list", data: [...]}`: a subclass names its item class,
    `class ModelList(ListObject[Model])`, and may add fields (paging, usage)."""

    object: str = "list"
    data: list[Item] = dataclasses.field(default_factory=list)


def _bound_type_arguments(cls: type) -> dict[Any, Any]:
    """The type variables of generic bases that `cls` or its bases bind (`ListObject[Model]`: Item -> Model)."""
    bound: dict[Any, Any] = {}
    for klass in reversed(cls.__mro__):
        for base in klass.__dict__.get("__orig_bases__", ()):
            origin = typing.get_origin(base)
            if origin is not None and origin is not Generic:
                bound.update(zip(getattr(origin, "__parameters__", ()), typing.get_args(base)))
    return bound


def _nested_class(hint: Any, bound: Mapping[Any, Any]) -> tuple[type[APIObject] | None, bool]:
    """The result class a field's annotation names (`X`, `X | None`), or its items' (`list[X]`, `list[X] | None`),
    and whether it is a list; `(None, False)` for any other annotation (its value is kept as decoded). A type
    variable stands for what `bound` says the class binds it to."""
    members = [hint]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        members = [m for m in typing.get_args(hint) if m is not type(None)]
    if len(members) != 1:
        return None, False
    member, is_list = members[0], False
    if typing.get_origin(member) is list and len(typing.get_args(member)) == 1:
        member, is_list = typing.get_args(member)[0], True
    member = bound.get(member, member) if isinstance(member, TypeVar) else member
    if isinstance(member, type) and issubclass(member, APIObject):
        return member, is_list
    return None, False

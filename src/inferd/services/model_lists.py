"""Allow-lists inside allow-lists: a key's models within its team's and
its org's, a team's within its org's, an org admin's narrowing within the operator's list.

A list names models by id or alias, and a call is allowed when a list names any name of its model
(catalogue.ModelCatalogue.allowed); so "within" is decided per model, not per spelling: `fast`
is within `["mock-chat"]` when `fast` is an alias of mock-chat.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from inferd.config_models import ModelConfig
from inferd.errors import InvalidRequest, OperatorLimit

# Every name (id and aliases) of the model a name denotes; None when the catalogue has no such model.
NamesOf = Callable[[str], "tuple[str, ...] | None"]


def names_in(models: Iterable[ModelConfig]) -> NamesOf:
    """The NamesOf of a catalogue's models."""
    by_name: dict[str, tuple[str, ...]] = {}
    for config in models:
        names = (config.id, *config.aliases)
        for name in names:
            by_name[name] = names
    return by_name.get


def known(names: Sequence[str], names_of: NamesOf, param: str = "models") -> tuple[str, ...]:
    """`names` in order without repeats, each a model or alias of the catalogue (a typo would silently
    lock callers out); 400 `model_not_found` otherwise."""
    for name in names:
        if names_of(name) is None:
            raise InvalidRequest(f"{param}: no model or alias '{name}' in the catalogue", param=param,
                                 code="model_not_found")
    return tuple(dict.fromkeys(names))


def outside(names: Sequence[str], ceiling: tuple[str, ...] | None, names_of: NamesOf) -> list[str]:
    """The names whose model `ceiling` does not allow (None allows every model)."""
    if ceiling is None:
        return []
    return [name for name in names if not any(alias in ceiling for alias in names_of(name) or (name,))]


def check_within(names: Sequence[str] | None, ceilings: Sequence[tuple[str, tuple[str, ...] | None]],
                 names_of: NamesOf, param: str = "models") -> None:
    """400 `model_not_allowed` when `names` (None: every model the level above allows) reach past one
    of `ceilings`, each (what it is, e.g. "team 'ops'", its list)."""
    if names is None:
        return
    for label, ceiling in ceilings:
        wider = outside(names, ceiling, names_of)
        if wider:
            raise InvalidRequest(f"{param}: {', '.join(wider)} not in the models of the {label} "
                                 f"({', '.join(ceiling or ()) or 'none'})", param=param, code="model_not_allowed")


def narrowed(names: Sequence[str], operator: tuple[str, ...] | None, names_of: NamesOf) -> tuple[str, ...]:
    """An org admin's narrowing of the operator's list, spelt as the operator's list spells each model
    (so the two compare name by name at lookup: store.orgs.effective_models); 403 `operator_limit`
    when it names a model the operator's list does not allow."""
    if operator is None:
        return tuple(names)
    wider = outside(names, operator, names_of)
    if wider:
        raise OperatorLimit(f"models: {', '.join(wider)} not in the models the operator allows this organisation "
                            f"({', '.join(operator) or 'none'})", param="models")
    spelt: list[str] = []
    for name in names:
        aliases = names_of(name) or (name,)
        spelt += [allowed for allowed in operator if allowed in aliases]
    return tuple(dict.fromkeys(spelt))


def model_limits(given: Mapping[str, Any] | None, names_of: NamesOf, param: str = "model_limits"
                 ) -> dict[str, dict[str, int]] | None:
    """Per-model windows `{model: {"rpm": n, "tpm": n}}` keyed by each model's canonical id (an alias
    counts as its model, and the windows count on the id); 400 for an unknown model or a limit that
    is not a positive integer. None or {} removes them."""
    if not given:
        return None
    limits: dict[str, dict[str, int]] = {}
    for name, window in given.items():
        names = names_of(name)
        if names is None:
            raise InvalidRequest(f"{param}: no model or alias '{name}' in the catalogue", param=param,
                                 code="model_not_found")
        if hasattr(window, "model_dump"):
            window = window.model_dump(exclude_none=True)
        checked = {}
        for kind, value in dict(window).items():
            if value is None:
                continue
            if kind not in ("rpm", "tpm") or isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31:
                raise InvalidRequest(f"{param}: {name}: expected rpm and tpm as positive integers", param=param)
            checked[kind] = value
        if not checked:
            raise InvalidRequest(f"{param}: {name}: give rpm, tpm or both", param=param)
        limits[names[0]] = checked
    return limits


def parse_model_limit(text: str) -> tuple[str, dict[str, int]]:
    """`MODEL:rpm=N,tpm=N` (the command line's `--model-limit`) as (model, limits); ValueError otherwise."""
    model, sep, rest = text.partition(":")
    if not sep or not model or not rest:
        raise ValueError(f"expected MODEL:rpm=N,tpm=N, got {text!r}")
    limits: dict[str, int] = {}
    for part in rest.split(","):
        kind, eq, value = part.strip().partition("=")
        if not eq or kind not in ("rpm", "tpm") or not value.isdigit() or not 1 <= int(value) < 2**31:
            raise ValueError(f"expected MODEL:rpm=N,tpm=N (positive integers), got {text!r}")
        limits[kind] = int(value)
    return model, limits

"""A request's `Cache-Control` header, as the response cache reads it: `no-cache` (do not read, do
store), `no-store` (neither), `max-age=N` (read only an entry at most N seconds old). Other
directives are ignored; a malformed `max-age` is ignored too (the header is advice, never a 400)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CacheControl:
    """What one request allows the cache to do."""

    read: bool = True
    store: bool = True
    max_age: int | None = None  # seconds; None: any entry within the ttl


DEFAULT = CacheControl()


def parse_cache_control(value: str | None) -> CacheControl:
    """The directives of a `Cache-Control` value (case-insensitive, comma-separated)."""
    if not value:
        return DEFAULT
    read, store, max_age = True, True, None
    for directive in value.split(","):
        name, _, argument = directive.strip().partition("=")
        name = name.strip().lower()
        if name == "no-cache":
            read = False
        elif name == "no-store":
            read = store = False
        elif name == "max-age":
            argument = argument.strip().strip('"')
            if argument.isdigit():
                max_age = int(argument) if max_age is None else min(max_age, int(argument))
    return CacheControl(read, store, max_age)

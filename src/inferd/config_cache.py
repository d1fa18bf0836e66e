"""The `[cache]` table: the response cache (a call whose answer is already stored is answered from
the store, for the tenant that stored it only).

```toml
[cache]
enabled = true               # default false: nothing is looked up or stored
ttl_s = 3600                 # an entry older than this is never served
max_entries = 100000         # the most entries kept; the oldest leave first
scope = "key"                # "key" (default), "team" or "org": who shares entries
only_deterministic = true    # only requests whose output is determined (temperature 0, or a seed)
semantic_model = "embed"     # optional: an embedding model for answers to questions that mean the same
semantic_threshold = 0.95    # the least cosine similarity of such a match
```

A model is left out with `cache = false` in its `[[models]]` entry.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

from inferd.errors import ConfigError

TABLE = "[cache]"
SCOPES = ("key", "team", "org")

# Builds the error naming the file, the table and the key (config.py `_Where.fail`).
Fail = Callable[[str, str | None, str], ConfigError]


@dataclass(frozen=True)
class CacheConfig:
    """The response cache's settings (`enabled` false: the corridor tests one attribute, nothing more)."""

    enabled: bool = False
    ttl_s: int = 3600
    max_entries: int = 100_000
    scope: str = "key"
    only_deterministic: bool = True
    semantic_model: str | None = None
    semantic_threshold: float = 0.95


def parse_cache(fail: Fail, raw: Any) -> CacheConfig:
    """The checked `[cache]` table; ConfigError naming the key otherwise."""
    if not isinstance(raw, dict):
        raise fail(TABLE, None, "expected a table")
    known = [f.name for f in fields(CacheConfig)]
    for key, value in raw.items():
        if key not in known:
            raise fail(TABLE, key, f"unknown key (known: {', '.join(known)})")
        if key in ("enabled", "only_deterministic"):
            if not isinstance(value, bool):
                raise fail(TABLE, key, f"expected bool, got {type(value).__name__} {value!r}")
        elif key in ("ttl_s", "max_entries"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise fail(TABLE, key, f"expected int, got {type(value).__name__} {value!r}")
            if not 1 <= value < 2**31:
                raise fail(TABLE, key, "must be a positive integer below 2**31")
        elif key == "scope":
            if value not in SCOPES:
                raise fail(TABLE, key, f"must be one of {', '.join(SCOPES)}")
        elif key == "semantic_model":
            if not isinstance(value, str) or not value:
                raise fail(TABLE, key, "expected the id of an embedding model")
        elif key == "semantic_threshold":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise fail(TABLE, key, "must be a number above 0 and at most 1")
    values = dict(raw)
    if "semantic_threshold" in values:
        values["semantic_threshold"] = float(values["semantic_threshold"])
    return CacheConfig(**values)

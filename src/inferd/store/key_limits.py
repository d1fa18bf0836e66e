"""What limits a key's calls, as its lookup assembles it: the budgets it falls under (its own, its
team's, its org's) and the sliding windows it counts in (its own, its team's), each named so
that every replica counts one owner in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

PERIODS = ("day", "week", "month", "total")
DEFAULT_PERIOD = "month"  # the spec's: a key's budget is monthly


@dataclass(frozen=True)
class Budget:
    """A budget in USD over a calendar period."""

    scope: str  # key | team | org
    owner: str  # the charged access key id, the team id, the org slug (as `spend` rows name them)
    name: str  # how messages name it: the key id, the team's name, the org's slug
    usd: float
    period: str  # day | week | month | total


@dataclass(frozen=True)
class Window:
    """Requests and tokens per minute of one owner (or of one owner on one model)."""

    scope: str  # key | team | model
    name: str  # the window's id: unique across owners
    rpm: int | None
    tpm: int | None
    model: str | None = None  # the canonical model id of a per-model window; None: every model


def encode_models(models: tuple[str, ...] | None) -> str | None:
    """The stored form of a key's or team's allow-list (NULL: what the level above allows)."""
    return None if models is None else orjson.dumps(list(models)).decode()


def decode_models(stored: str | None) -> tuple[str, ...] | None:
    """The allow-list from its stored form."""
    return None if stored is None else tuple(orjson.loads(stored))


def encode_model_limits(limits: dict[str, dict[str, int]] | None) -> str | None:
    """The stored form of per-model limits `{model: {"rpm": n, "tpm": n}}` (NULL: none)."""
    return orjson.dumps(limits).decode() if limits else None


def decode_model_limits(stored: str | None) -> dict[str, dict[str, Any]]:
    """Per-model limits from their stored form."""
    return orjson.loads(stored) if stored else {}

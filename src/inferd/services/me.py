"""GET /v1/me: what the calling key is, which models it may use, and what is left of every window
and budget it falls under. It reads; it counts nothing."""

from __future__ import annotations

from datetime import date
from typing import Any, Awaitable, Callable

from inferd.auth.key_record import KeyRecord
from inferd.catalogue import ModelCatalogue
from inferd.limits.base import Limits
from inferd.limits.periods import window_of
from inferd.store.db import iso


def _midnight(day: date | None) -> str | None:
    """A period's first day as the RFC 3339 instant it starts (UTC midnight); None for `total`."""
    return None if day is None else f"{day.isoformat()}T00:00:00Z"


async def describe(key: KeyRecord, catalogue: ModelCatalogue, limits: Limits,
                   settle_usage: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    """The wire form of GET /v1/me for a long-lived key."""
    windows = [{"scope": window.scope, "model": window.model, "rpm": window.rpm, "tpm": window.tpm,
                "remaining_requests": requests, "remaining_tokens": tokens}
               for window, requests, tokens in await limits.remaining(key)]
    budgets = []
    if key.budgets:
        await settle_usage()  # usage rows still in a journal count in the spend
        for budget in key.budgets:
            start, end = window_of(budget.period)
            budgets.append({"scope": budget.scope, "budget_usd": budget.usd, "period": budget.period,
                            # a float sum, rounded like the admin's and the usage summary's
                            "spend_usd": round(await limits.spend.current(budget), 10),
                            "period_start": _midnight(start), "resets_at": _midnight(end)})
    return {"access_key_id": key.access_key_id, "type": key.type, "org": key.org_slug, "team": key.team_name,
            "models": [model["id"] for model in catalogue.listing(key)],
            "expires_at": iso(key.expires_at) if key.expires_at is not None else None,
            "limits": windows, "budgets": budgets}

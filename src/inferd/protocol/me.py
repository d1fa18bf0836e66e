"""Wire schema of GET /v1/me (no logic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class WindowState(BaseModel):
    """One rate window the key counts in, and what is left of it now."""

    scope: Literal["key", "team"]
    model: str | None  # the canonical model id of a per-model window; null: every model
    rpm: int | None
    tpm: int | None
    remaining_requests: int | None  # null where the window sets no rpm
    remaining_tokens: int | None  # null where the window sets no tpm


class BudgetState(BaseModel):
    """One budget the key's metered calls fall under, and its spend in the period under way."""

    scope: Literal["key", "team", "org"]
    budget_usd: float
    period: Literal["day", "week", "month", "total"]
    spend_usd: float
    period_start: str | None  # RFC 3339 (UTC midnight); null for `total`
    resets_at: str | None  # RFC 3339, the first instant of the next period; null for `total`


class Me(BaseModel):
    """GET /v1/me: the calling key, the models it may use and what is left of its limits."""

    access_key_id: str
    type: Literal["application", "admin"]
    org: str
    team: str | None
    models: list[str]  # the ids of the live models the key may use (as GET /v1/models lists them)
    expires_at: str | None  # RFC 3339, UTC
    limits: list[WindowState]
    budgets: list[BudgetState]

"""Typed result of `GET /v1/me`: the calling key as the server sees it now."""

from __future__ import annotations

import dataclasses

from inferd_client._base import APIObject


class WindowState(APIObject):
    """One rate window the key counts in (`scope` `key` or `team`), and what is left of it now.

    `model` is set for a per-model window (its canonical id); a `remaining_*` is None where the
    window sets no such limit.
    """

    scope: str = ""
    model: str | None = None
    rpm: int | None = None
    tpm: int | None = None
    remaining_requests: int | None = None
    remaining_tokens: int | None = None


class BudgetState(APIObject):
    """One budget the key's metered calls fall under (`scope` `key`, `team` or `org`) and its spend
    in the period under way; `period_start` and `resets_at` are RFC 3339 instants, None for `total`."""

    scope: str = ""
    budget_usd: float = 0.0
    period: str = "month"
    spend_usd: float = 0.0
    period_start: str | None = None
    resets_at: str | None = None


class Me(APIObject):
    """`GET /v1/me`: the key's id, type, org and team, the models it may use, its expiry, and
    every window and budget it falls under."""

    access_key_id: str = ""
    type: str = ""
    org: str = ""
    team: str | None = None
    models: list[str] = dataclasses.field(default_factory=list)
    expires_at: str | None = None
    limits: list[WindowState] = dataclasses.field(default_factory=list)
    budgets: list[BudgetState] = dataclasses.field(default_factory=list)

    def budget(self, scope: str) -> BudgetState | None:
        """The budget of `scope` (`key`, `team` or `org`), or None when that owner sets none."""
        return next((budget for budget in self.budgets if budget.scope == scope), None)

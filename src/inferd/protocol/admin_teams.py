"""Wire schemas of /v1/admin/teams (no logic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from inferd.protocol.admin_fields import BudgetUsd, ModelLimits, Models, Period, Rpm, TeamName, Tpm


class TeamSettings(BaseModel):
    """PATCH /v1/admin/teams/{name}: only the fields sent change; null removes a limit (`models` null:
    what the org allows; `budget_period` null: month)."""

    model_config = ConfigDict(extra="forbid")

    budget_usd: BudgetUsd | None = None
    budget_period: Period | None = None
    rpm: Rpm | None = None
    tpm: Tpm | None = None
    models: Models | None = None  # within the org's models
    model_limits: ModelLimits | None = None  # the team's own windows per model; null: none


class TeamCreateRequest(TeamSettings):
    """POST /v1/admin/teams."""

    name: TeamName


class TeamObject(BaseModel):
    """A team as its org's admin sees it."""

    name: str
    budget_usd: float | None
    budget_period: Period
    rpm: int | None
    tpm: int | None
    models: list[str] | None  # null: what the org allows
    model_limits: dict[str, dict[str, int]] | None  # {model id: {rpm?, tpm?}}
    spend_usd: float  # in the budget's period under way
    period_start: str | None  # YYYY-MM-DD (UTC); null for `total`
    resets_at: str | None  # YYYY-MM-DD (UTC), the first day of the next period; null for `total`


class TeamList(BaseModel):
    """GET /v1/admin/teams: by name."""

    object: Literal["list"] = "list"
    data: list[TeamObject]


class TeamDeleted(BaseModel):
    """DELETE /v1/admin/teams/{name}."""

    name: str
    deleted: Literal[True] = True

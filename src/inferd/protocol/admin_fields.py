"""Field types of the /v1/admin schemas, and the governance fields a key gains (no
logic)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

# Strict: a budget is a JSON number and a limit a JSON integer, never a string or a boolean.
BudgetUsd = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]
# Limits are stored as 32-bit integers (PostgreSQL INTEGER): a larger one is a 400, not a 500.
INT32_MAX = 2**31 - 1
Rpm = Annotated[int, Field(ge=1, le=INT32_MAX, strict=True)]
Tpm = Annotated[int, Field(ge=1, le=INT32_MAX, strict=True)]
KeyName = Annotated[str, Field(min_length=1, max_length=256, strict=True)]
Email = Annotated[str, Field(max_length=320, pattern=r"^[^@\s]+@[^@\s]+$", strict=True)]
ModelName = Annotated[str, Field(min_length=1, max_length=256, strict=True)]
Models = Annotated[list[ModelName], Field(max_length=1024)]
Period = Literal["day", "week", "month", "total"]
Duration = Annotated[str, Field(min_length=1, max_length=32, strict=True)]  # 30d, 12h, 15m, 45s


class ModelLimit(BaseModel):
    """A key's or team's own windows on one model (`--model-limit MODEL:rpm=N,tpm=N`)."""

    model_config = {"extra": "forbid"}

    rpm: Rpm | None = None
    tpm: Tpm | None = None


# {model id or alias: {rpm?, tpm?}}; counted on the model's canonical id.
ModelLimits = Annotated[dict[ModelName, ModelLimit], Field(max_length=256)]
# A team's name travels in paths (/v1/admin/teams/{name}) and in `ORG/TEAM` on the command line: no slash.
TEAM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
TeamName = Annotated[str, Field(pattern=TEAM_NAME_PATTERN, strict=True)]


class KeyGovernance(BaseModel):
    """What POST and PATCH /v1/admin/keys set besides its basic fields: `team` (null: none),
    `tpm`, `budget_period` (null: month), `models` (a subset of what the team and org allow; null:
    all of it), and the expiry as `expires_in` (`30d`, `12h`, `15m`) or `expires_at` (RFC 3339;
    null: never)."""

    team: TeamName | None = None
    tpm: Tpm | None = None
    budget_period: Period | None = None
    models: Models | None = None
    model_limits: ModelLimits | None = None  # null: none
    expires_in: Duration | None = None
    expires_at: datetime | None = None

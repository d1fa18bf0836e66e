"""Wire schemas of /v1/admin (no logic)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.protocol.admin_fields import BudgetUsd, Email, KeyGovernance, KeyName, ModelName, Period, Rpm


class KeyCreateRequest(KeyGovernance):
    """POST /v1/admin/keys: a key of the admin's org (user keys come from POST /v1/auth/exchange)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["application", "admin"]
    name: KeyName | None = None
    user_email: Email | None = None
    budget_usd: BudgetUsd | None = None
    rpm: Rpm | None = None


class KeyUpdateRequest(KeyGovernance):
    """PATCH /v1/admin/keys/{access_key_id}: only the fields sent change; null removes a limit."""

    model_config = ConfigDict(extra="forbid")

    name: KeyName | None = None
    budget_usd: BudgetUsd | None = None
    rpm: Rpm | None = None


class KeyRotateRequest(BaseModel):
    """POST /v1/admin/keys/{access_key_id}/rotate: how long the old secret stays valid (default 0)."""

    model_config = ConfigDict(extra="forbid")

    # at most a year (store.keys.MAX_ROTATION_GRACE_S), so the expiry is always a datetime
    grace_s: Annotated[float, Field(ge=0, le=366 * 86400, strict=True, allow_inf_nan=False)] = 0


class KeyObject(BaseModel):
    """A long-lived key as its org's admin sees it (never its secret)."""

    access_key_id: str
    name: str | None
    type: str
    user_email: str | None
    budget_usd: float | None
    rpm: int | None
    created_at: str  # RFC 3339, UTC
    revoked_at: str | None
    spend_usd: float  # in the budget's period under way
    # governance
    team: str | None
    tpm: int | None
    budget_period: Period
    models: list[str] | None  # null: what its team and org allow
    model_limits: dict[str, dict[str, int]] | None
    expires_at: str | None  # RFC 3339, UTC
    period_start: str | None  # YYYY-MM-DD (UTC); null for `total`
    resets_at: str | None  # YYYY-MM-DD (UTC), the first day of the next period; null for `total`


class CreatedKey(KeyObject):
    """The answer to POST /v1/admin/keys: the only time the secret is shown."""

    secret: str
    full_key: str  # ACCESS_KEY_ID:SECRET


class KeyList(BaseModel):
    """GET /v1/admin/keys."""

    object: Literal["list"] = "list"
    data: list[KeyObject]


class OrgSettings(BaseModel):
    """GET and PATCH /v1/admin/org."""

    slug: str
    models: list[str] | Literal["*"]
    file_attachments: bool
    web_search: bool


class OrgUpdateRequest(BaseModel):
    """PATCH /v1/admin/org: only the fields sent change (none of them may be null). `models` narrows
    the operator's list (`"*"`: all of it); `budget_usd` and `budget_period` are the operator's to
    set, so sending them is 403 `operator_limit`."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelName] | Literal["*"] | None = None
    budget_usd: Any = None
    budget_period: Any = None
    file_attachments: Annotated[bool, Field(strict=True)] | None = None
    web_search: Annotated[bool, Field(strict=True)] | None = None


class DeploymentHealth(BaseModel):
    """One deployment as this server's pool sees it."""

    model: str
    deployment: str
    up: bool
    in_flight: int
    failures: int  # failed attempts since the server started, all reasons
    failures_by_reason: dict[str, int]  # connect, timeout, status_5xx, status_429
    cooldown_until: str | None  # RFC 3339, UTC; null when not in cooldown


class DeploymentList(BaseModel):
    """GET /v1/admin/deployments."""

    object: Literal["list"] = "list"
    data: list[DeploymentHealth]


class AuditEntryObject(BaseModel):
    """One administrative change."""

    id: int
    at: str  # RFC 3339, UTC
    actor: str  # the admin key's access key id, "cli", or (user_key.mint) the owning key's id
    action: Literal["key.create", "key.update", "key.revoke", "org.create", "org.update", "user_key.mint",
                    "batch.cancel", "file.delete", "key.rotate", "team.create", "team.update", "team.delete",
                    "cache.clear"]
    target: str  # an access key id, the org's slug, a user id (user_key.mint), a batch or file id
    details: dict[str, Any]


class CacheCleared(BaseModel):
    """DELETE /v1/admin/cache: how many of the org's response-cache entries were removed."""

    object: Literal["cache.cleared"]
    deleted: int


class AuditList(BaseModel):
    """GET /v1/admin/audit: newest first; `after` an entry id to page on."""

    object: Literal["list"] = "list"
    data: list[AuditEntryObject]
    has_more: bool

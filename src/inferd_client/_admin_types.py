"""Typed results of the /v1/admin routes: keys, teams, org settings,
deployments, audit."""

from __future__ import annotations

import dataclasses
from typing import Any

from inferd_client._base import APIObject, ListObject


class AdminKey(APIObject):
    """A long-lived key of the org as its admin sees it (never its secret)."""

    access_key_id: str = ""
    name: str | None = None
    type: str = ""
    user_email: str | None = None
    budget_usd: float | None = None
    rpm: int | None = None
    created_at: str = ""
    revoked_at: str | None = None
    spend_usd: float = 0.0  # in the budget's period under way (this UTC month by default)
    # governance: None where unset (`models` None: what its team and org allow)
    team: str | None = None
    tpm: int | None = None
    budget_period: str = "month"
    models: list[str] | None = None
    model_limits: dict[str, dict[str, int]] | None = None  # {model: {rpm?, tpm?}}
    expires_at: str | None = None
    period_start: str | None = None  # YYYY-MM-DD (UTC); None for `total`
    resets_at: str | None = None  # YYYY-MM-DD (UTC), the first day of the next period


class CreatedKey(AdminKey):
    """`POST /v1/admin/keys` and `POST /v1/admin/keys/{id}/rotate`: the key with its (new) secret,
    shown this once."""

    secret: str = ""
    full_key: str = ""  # ACCESS_KEY_ID:SECRET, the bearer token


class AdminKeyList(ListObject[AdminKey]):
    """`GET /v1/admin/keys`."""


class Team(APIObject):
    """A team of the org: its limits (None where unset) and its spend in the budget's period."""

    name: str = ""
    budget_usd: float | None = None
    budget_period: str = "month"
    rpm: int | None = None
    tpm: int | None = None
    models: list[str] | None = None  # None: what the org allows
    model_limits: dict[str, dict[str, int]] | None = None  # {model: {rpm?, tpm?}}
    spend_usd: float = 0.0
    period_start: str | None = None  # YYYY-MM-DD (UTC); None for `total`
    resets_at: str | None = None  # YYYY-MM-DD (UTC), the first day of the next period


class TeamList(ListObject[Team]):
    """`GET /v1/admin/teams`, by name."""


class TeamDeleted(APIObject):
    """`DELETE /v1/admin/teams/{name}`."""

    name: str = ""
    deleted: bool = True


class OrgSettings(APIObject):
    """`GET`/`PATCH /v1/admin/org`; `models` is a list of ids and aliases, or `"*"` for every model."""

    slug: str = ""
    models: list[str] | str = "*"
    file_attachments: bool = True
    web_search: bool = False


class DeploymentHealth(APIObject):
    """One deployment as the answering server sees it."""

    model: str = ""
    deployment: str = ""
    up: bool = True
    in_flight: int = 0
    failures: int = 0
    failures_by_reason: dict[str, int] = dataclasses.field(default_factory=dict)
    cooldown_until: str | None = None


class DeploymentList(ListObject[DeploymentHealth]):
    """`GET /v1/admin/deployments`."""


class AuditEntry(APIObject):
    """One administrative change: `actor` is an admin key's access key id or `cli`."""

    id: int = 0
    at: str = ""
    actor: str = ""
    action: str = ""
    target: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


class AuditPage(ListObject[AuditEntry]):
    """One page of `GET /v1/admin/audit`, newest first."""

    has_more: bool = False

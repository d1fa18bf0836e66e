"""Typed results of the /v1/admin routes: keys, teams, org settings,
deployments, audit."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from inferd_client._base import APIObject


@dataclass(kw_only=True)
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


@dataclass(kw_only=True)
class CreatedKey(AdminKey):
    """`POST /v1/admin/keys` and `POST /v1/admin/keys/{id}/rotate`: the key with its (new) secret,
    shown this once."""

    secret: str = ""
    full_key: str = ""  # ACCESS_KEY_ID:SECRET, the bearer token


@dataclass(kw_only=True)
class AdminKeyList(APIObject):
    """`GET /v1/admin/keys`."""

    _nested_lists: ClassVar[Mapping[str, type[APIObject]]] = {"data": AdminKey}
    object: str = "list"
    data: list[AdminKey] = dataclasses.field(default_factory=list)


@dataclass(kw_only=True)
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


@dataclass(kw_only=True)
class TeamList(APIObject):
    """`GET /v1/admin/teams`, by name."""

    _nested_lists: ClassVar[Mapping[str, type[APIObject]]] = {"data": Team}
    object: str = "list"
    data: list[Team] = dataclasses.field(default_factory=list)


@dataclass(kw_only=True)
class TeamDeleted(APIObject):
    """`DELETE /v1/admin/teams/{name}`."""

    name: str = ""
    deleted: bool = True


@dataclass(kw_only=True)
class OrgSettings(APIObject):
    """`GET`/`PATCH /v1/admin/org`; `models` is a list of ids and aliases, or `"*"` for every model."""

    slug: str = ""
    models: list[str] | str = "*"
    file_attachments: bool = True
    web_search: bool = False


@dataclass(kw_only=True)
class DeploymentHealth(APIObject):
    """One deployment as the answering server sees it."""

    model: str = ""
    deployment: str = ""
    up: bool = True
    in_flight: int = 0
    failures: int = 0
    failures_by_reason: dict[str, int] = dataclasses.field(default_factory=dict)
    cooldown_until: str | None = None


@dataclass(kw_only=True)
class DeploymentList(APIObject):
    """`GET /v1/admin/deployments`."""

    _nested_lists: ClassVar[Mapping[str, type[APIObject]]] = {"data": DeploymentHealth}
    object: str = "list"
    data: list[DeploymentHealth] = dataclasses.field(default_factory=list)


@dataclass(kw_only=True)
class AuditEntry(APIObject):
    """One administrative change: `actor` is an admin key's access key id or `cli`."""

    id: int = 0
    at: str = ""
    actor: str = ""
    action: str = ""
    target: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(kw_only=True)
class AuditPage(APIObject):
    """One page of `GET /v1/admin/audit`, newest first."""

    _nested_lists: ClassVar[Mapping[str, type[APIObject]]] = {"data": AuditEntry}
    object: str = "list"
    data: list[AuditEntry] = dataclasses.field(default_factory=list)
    has_more: bool = False

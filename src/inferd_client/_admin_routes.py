"""Builders of the /v1/admin routes, shared by `Client` and `AsyncClient`."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from inferd_client import _calls as c
from inferd_client._admin_types import (AdminKey, AdminKeyList, AuditPage, CreatedKey, DeploymentList, OrgSettings,
                                        Team, TeamDeleted, TeamList)
from inferd_client._calls import NOT_GIVEN, Call, NotGiven, as_object, segment
from inferd_client._errors import ClientValidationError

KEY_TYPES = ("application", "admin")
AUDIT_LIMIT = (1, 100)


def _given(**values: Any) -> dict[str, Any]:
    """The arguments the caller gave (None is sent: it removes a limit)."""
    return {k: v for k, v in values.items() if v is not NOT_GIVEN}


def _wire(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Decision 23's settings of a key or team in their JSON form (a None stays None: it removes the setting)."""
    wire = dict(settings)
    if wire.get("models") is not None:
        if isinstance(wire["models"], str):  # list("fast") would send one model per letter
            raise ClientValidationError("models: a list of model ids and aliases, not one string")
        wire["models"] = list(wire["models"])
    if wire.get("model_limits") is not None:
        wire["model_limits"] = {model: dict(limits) for model, limits in wire["model_limits"].items()}
    if wire.get("expires_at") is not None:
        wire["expires_at"] = c.timestamp(wire["expires_at"])
    return wire


def _named(value: str, what: str) -> str:
    """A name or id as a path segment; empty, `.` and `..` would reach another route than the one meant."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise ClientValidationError(f"{what}: a non-empty name, got {value!r}")
    return segment(value)


def list_keys() -> Call[AdminKeyList]:
    """`GET /v1/admin/keys`."""
    return Call("GET", "/v1/admin/keys", as_object(AdminKeyList), read=True)


def create_key(key_type: str, settings: Mapping[str, Any]) -> Call[CreatedKey]:
    """`POST /v1/admin/keys` with the settings given (None: not sent); the type is checked before any request."""
    if key_type not in KEY_TYPES:
        raise ClientValidationError(f"type: one of {', '.join(KEY_TYPES)} (user keys come from exchange())")
    body = {"type": key_type, **_wire(c.clean(settings))}
    return Call("POST", "/v1/admin/keys", as_object(CreatedKey), json=body)


def get_key(access_key_id: str) -> Call[AdminKey]:
    """`GET /v1/admin/keys/{access_key_id}`."""
    return Call("GET", f"/v1/admin/keys/{segment(access_key_id)}", as_object(AdminKey), read=True)


def update_key(access_key_id: str, settings: Mapping[str, Any]) -> Call[AdminKey]:
    """`PATCH /v1/admin/keys/{access_key_id}`: only the settings given are sent; None removes a limit."""
    body = _wire(_given(**settings))
    return Call("PATCH", f"/v1/admin/keys/{segment(access_key_id)}", as_object(AdminKey), json=body)


def revoke_key(access_key_id: str) -> Call[AdminKey]:
    """`DELETE /v1/admin/keys/{access_key_id}`."""
    return Call("DELETE", f"/v1/admin/keys/{segment(access_key_id)}", as_object(AdminKey))


def rotate_key(access_key_id: str, grace_s: float) -> Call[CreatedKey]:
    """`POST /v1/admin/keys/{access_key_id}/rotate`: a new secret, the old one valid `grace_s` seconds more."""
    return Call("POST", f"/v1/admin/keys/{_named(access_key_id, 'access_key_id')}/rotate", as_object(CreatedKey),
                json={"grace_s": grace_s})


def list_teams() -> Call[TeamList]:
    """`GET /v1/admin/teams`."""
    return Call("GET", "/v1/admin/teams", as_object(TeamList), read=True)


def create_team(name: str, settings: Mapping[str, Any]) -> Call[Team]:
    """`POST /v1/admin/teams` with the settings given (None: not sent)."""
    return Call("POST", "/v1/admin/teams", as_object(Team), json={"name": name, **_wire(c.clean(settings))})


def get_team(name: str) -> Call[Team]:
    """`GET /v1/admin/teams/{name}`."""
    return Call("GET", f"/v1/admin/teams/{_named(name, 'team')}", as_object(Team), read=True)


def update_team(name: str, settings: Mapping[str, Any]) -> Call[Team]:
    """`PATCH /v1/admin/teams/{name}`: only the settings given are sent; None removes a limit."""
    return Call("PATCH", f"/v1/admin/teams/{_named(name, 'team')}", as_object(Team),
                json=_wire(_given(**settings)))


def delete_team(name: str) -> Call[TeamDeleted]:
    """`DELETE /v1/admin/teams/{name}`."""
    return Call("DELETE", f"/v1/admin/teams/{_named(name, 'team')}", as_object(TeamDeleted))


def get_org() -> Call[OrgSettings]:
    """`GET /v1/admin/org`."""
    return Call("GET", "/v1/admin/org", as_object(OrgSettings), read=True)


def update_org(models: Sequence[str] | str | NotGiven, file_attachments: bool | NotGiven,
               web_search: bool | NotGiven) -> Call[OrgSettings]:
    """`PATCH /v1/admin/org`: only the arguments given are sent."""
    if isinstance(models, str) and models != "*":
        raise ClientValidationError('models: a list of model ids and aliases, or "*" for every model')
    body = _given(models=models if isinstance(models, (str, NotGiven)) else list(models),
                  file_attachments=file_attachments, web_search=web_search)
    return Call("PATCH", "/v1/admin/org", as_object(OrgSettings), json=body)


def deployments() -> Call[DeploymentList]:
    """`GET /v1/admin/deployments`."""
    return Call("GET", "/v1/admin/deployments", as_object(DeploymentList), read=True)


def audit(limit: int, after: int | None) -> Call[AuditPage]:
    """`GET /v1/admin/audit`: one page, newest first; the limit (1..100) is checked before any request."""
    if not AUDIT_LIMIT[0] <= limit <= AUDIT_LIMIT[1]:
        raise ClientValidationError(f"limit: between {AUDIT_LIMIT[0]} and {AUDIT_LIMIT[1]}")
    return Call("GET", "/v1/admin/audit", as_object(AuditPage), read=True,
                params=c.clean({"limit": limit, "after": after}))

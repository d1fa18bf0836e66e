"""Builders of the /v1/admin routes (CONTRACT.md decision 19), shared by `Client` and `AsyncClient`."""

from __future__ import annotations

from typing import Any, Sequence

from inferd_client import _calls as c
from inferd_client._admin_types import AdminKey, AdminKeyList, AuditPage, CreatedKey, DeploymentList, OrgSettings
from inferd_client._calls import NOT_GIVEN, Call, NotGiven, as_object, segment
from inferd_client._errors import ClientValidationError

KEY_TYPES = ("application", "admin")
AUDIT_LIMIT = (1, 100)


def _given(**values: Any) -> dict[str, Any]:
    """The arguments the caller gave (None is sent: it removes a limit)."""
    return {k: v for k, v in values.items() if v is not NOT_GIVEN}


def list_keys() -> Call[AdminKeyList]:
    """`GET /v1/admin/keys`."""
    return Call("GET", "/v1/admin/keys", as_object(AdminKeyList), read=True)


def create_key(key_type: str, name: str | None, user_email: str | None, budget_usd: float | None,
               rpm: int | None) -> Call[CreatedKey]:
    """`POST /v1/admin/keys`; the type is checked before any request."""
    if key_type not in KEY_TYPES:
        raise ClientValidationError(f"type: one of {', '.join(KEY_TYPES)} (user keys come from exchange())")
    body = {"type": key_type, **c.clean({"name": name, "user_email": user_email, "budget_usd": budget_usd,
                                         "rpm": rpm})}
    return Call("POST", "/v1/admin/keys", as_object(CreatedKey), json=body)


def get_key(access_key_id: str) -> Call[AdminKey]:
    """`GET /v1/admin/keys/{access_key_id}`."""
    return Call("GET", f"/v1/admin/keys/{segment(access_key_id)}", as_object(AdminKey), read=True)


def update_key(access_key_id: str, name: str | None | NotGiven, budget_usd: float | None | NotGiven,
               rpm: int | None | NotGiven) -> Call[AdminKey]:
    """`PATCH /v1/admin/keys/{access_key_id}`: only the arguments given are sent; None removes a limit."""
    body = _given(name=name, budget_usd=budget_usd, rpm=rpm)
    return Call("PATCH", f"/v1/admin/keys/{segment(access_key_id)}", as_object(AdminKey), json=body)


def revoke_key(access_key_id: str) -> Call[AdminKey]:
    """`DELETE /v1/admin/keys/{access_key_id}`."""
    return Call("DELETE", f"/v1/admin/keys/{segment(access_key_id)}", as_object(AdminKey))


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

"""/v1/admin: an admin key administers its own org's keys and settings, reads the deployments'
health and the audit log. Any other key type is 403 `admin_key_required`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from inferd.api import admin_cache, admin_teams
from inferd.api.deps import admin_key, services
from inferd.auth.key_record import KeyRecord
from inferd.protocol.admin import (AuditList, CreatedKey, DeploymentList, KeyCreateRequest, KeyList, KeyObject,
                                   KeyUpdateRequest, OrgSettings, OrgUpdateRequest)
from inferd.protocol.admin import KeyRotateRequest
from inferd.services.admin import Administration

router = APIRouter(tags=["admin"])
router.include_router(admin_teams.router)  # /v1/admin/teams: one resource per module
router.include_router(admin_cache.router)  # /v1/admin/cache
GOVERNANCE = {"team", "tpm", "budget_period", "models", "model_limits", "expires_in", "expires_at"}  # governance


async def administration(request: Request) -> Administration:
    """The admin service over this app's stores (it holds nothing of its own; async: no thread hop)."""
    svc = services(request)
    return Administration(svc.db, svc.keys, svc.orgs, svc.catalogue, svc.writer.settle)


@router.get("/v1/admin/keys", response_model=KeyList)
async def list_keys(admin: KeyRecord = Depends(admin_key),
                    service: Administration = Depends(administration)) -> dict[str, Any]:
    """The org's application and admin keys (user keys minted by the exchange are not listed)."""
    return {"object": "list", "data": await service.list_keys(admin)}


@router.post("/v1/admin/keys", response_model=CreatedKey, status_code=201)
async def create_key(body: KeyCreateRequest, admin: KeyRecord = Depends(admin_key),
                     service: Administration = Depends(administration)) -> dict[str, Any]:
    """Mint a key in the admin's org; `secret` and `full_key` are shown here only. A `user_email`
    whose user already signs in through the identity provider is 403 `user_already_linked`."""
    return await service.create_key(admin, body.type, body.name, body.user_email, body.budget_usd, body.rpm,
                                    body.model_dump(include=body.model_fields_set & GOVERNANCE))


@router.get("/v1/admin/keys/{access_key_id}", response_model=KeyObject)
async def get_key(access_key_id: str, admin: KeyRecord = Depends(admin_key),
                  service: Administration = Depends(administration)) -> dict[str, Any]:
    """One key of the org."""
    return await service.get_key(admin, access_key_id)


@router.patch("/v1/admin/keys/{access_key_id}", response_model=KeyObject)
async def update_key(access_key_id: str, body: KeyUpdateRequest, admin: KeyRecord = Depends(admin_key),
                     service: Administration = Depends(administration)) -> dict[str, Any]:
    """Change `name`, `budget_usd`, `rpm`, `team`, `tpm`, `budget_period`, `models`, `model_limits`,
    `expires_in` or `expires_at` (null removes a limit); obeyed from the next request on. An unknown
    team is 404, models wider than the team's or org's 400."""
    return await service.update_key(admin, access_key_id, body.model_dump(include=body.model_fields_set))


@router.delete("/v1/admin/keys/{access_key_id}", response_model=KeyObject)
async def revoke_key(access_key_id: str, admin: KeyRecord = Depends(admin_key),
                     service: Administration = Depends(administration)) -> dict[str, Any]:
    """Revoke a key (401 from then on); the answer carries `revoked_at`."""
    return await service.revoke_key(admin, access_key_id)


@router.post("/v1/admin/keys/{access_key_id}/rotate", response_model=CreatedKey)
async def rotate_key(access_key_id: str, body: KeyRotateRequest | None = None, admin: KeyRecord = Depends(admin_key),
                     service: Administration = Depends(administration)) -> dict[str, Any]:
    """A new secret for the same key id (its usage and limits stay); the old secret stays valid
    `grace_s` seconds (default 0). `secret` and `full_key` are shown here only."""
    return await service.rotate_key(admin, access_key_id, body.grace_s if body is not None else 0.0)


@router.get("/v1/admin/org", response_model=OrgSettings)
async def get_org(admin: KeyRecord = Depends(admin_key),
                  service: Administration = Depends(administration)) -> dict[str, Any]:
    """The org's allow-list and feature flags."""
    return await service.org(admin)


@router.patch("/v1/admin/org", response_model=OrgSettings)
async def update_org(body: OrgUpdateRequest, admin: KeyRecord = Depends(admin_key),
                     service: Administration = Depends(administration)) -> dict[str, Any]:
    """Change any of `models` (a list within the operator's, or "*": all of the operator's),
    `file_attachments`, `web_search`; wider models, or the org's budget, are 403 `operator_limit`."""
    return await service.update_org(admin, body.model_dump(include=body.model_fields_set))


@router.get("/v1/admin/deployments", response_model=DeploymentList)
async def list_deployments(admin: KeyRecord = Depends(admin_key),
                           service: Administration = Depends(administration)) -> dict[str, Any]:
    """The health, as this server sees it, of the deployments of the models the org may use."""
    return {"object": "list", "data": service.deployments(admin)}


@router.get("/v1/admin/audit", response_model=AuditList)
async def audit(limit: int = Query(20, ge=1, le=100), after: int | None = Query(None, description="an entry id"),
                admin: KeyRecord = Depends(admin_key),
                service: Administration = Depends(administration)) -> dict[str, Any]:
    """The org's administrative changes, newest first; `after` pages to older entries."""
    return await service.audit(admin, limit, after)

"""/v1/admin/cache: an admin key empties its own org's response-cache entries (every key's and
team's of the org, whatever `[cache] scope` is). Any other key type is 403 `admin_key_required`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from inferd.api.deps import admin_key, services
from inferd.auth.key_record import KeyRecord
from inferd.protocol.admin import CacheCleared
from inferd.store.audit import AuditEntry, AuditLog

router = APIRouter(tags=["admin"])


@router.delete("/v1/admin/cache", response_model=CacheCleared)
async def clear_cache(request: Request, admin: KeyRecord = Depends(admin_key)) -> dict[str, Any]:
    """Remove the org's entries (none to remove while the cache is off), audited as `cache.clear`."""
    svc = services(request)
    deleted = await svc.cache.clear(admin.org_slug) if svc.cache is not None else 0
    await AuditLog(svc.db).record(admin.org_id, AuditEntry(admin.access_key_id, "cache.clear", admin.org_slug,
                                                           {"deleted": deleted}))
    return {"object": "cache.cleared", "deleted": deleted}

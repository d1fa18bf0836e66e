"""GET /v1/me: the calling application or admin key describes itself.
User keys are 403, as on every long-lived route; the call takes a slot of the key's windows like
any unmetered route, so the `remaining_requests` it shows already count it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from inferd.api.deps import long_lived_key, services
from inferd.auth.key_record import KeyRecord
from inferd.protocol.me import Me
from inferd.services.me import describe

router = APIRouter(tags=["me"])


@router.get("/v1/me", response_model=Me)
async def me(request: Request, key: KeyRecord = Depends(long_lived_key)) -> dict[str, Any]:
    """The key's id, type, org, team, models and expiry; each window with what is left of it now,
    each budget with its spend in the period under way and when it resets."""
    svc = services(request)
    return await describe(key, svc.catalogue, svc.limits, svc.writer.settle)

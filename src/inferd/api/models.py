"""GET /v1/models: the catalogue the caller's org may use, live models only."""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Depends, Request, Response

from inferd.api.deps import long_lived_key, services
from inferd.auth.key_record import KeyRecord
from inferd.protocol.models import ModelList

router = APIRouter()


@router.get("/v1/models", response_model=ModelList, tags=["models"])
async def list_models(request: Request, key: KeyRecord = Depends(long_lived_key)) -> Response:
    """Models the org may use and that are live; `created` is set per response."""
    created = int(time.time())
    data = [{"id": obj["id"], "object": obj["object"], "created": created, **obj}
            for obj in services(request).catalogue.listing(key)]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")

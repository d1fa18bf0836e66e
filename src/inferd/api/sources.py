"""GET /v1/conversations/{id}/sources, GET /v1/sources and PATCH /v1/sources/{id} (the source owner's
switches). User keys only; errors in the application envelope."""

from __future__ import annotations

import re
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request, Response

from inferd.api.deps import services, user_key
from inferd.auth.key_record import KeyRecord
from inferd.errors import InvalidRequest, NotFound, PermissionDenied
from inferd.services.conversations import parse_path_id
from inferd.store import sources as store
from inferd.protocol.conversations import MAX_ID

router = APIRouter(tags=["sources"])

_PATH_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SWITCHES = ("is_active", "use_in_tasks")


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def path_integer(raw: str) -> int | None:
    """An id path parameter: 400 unless 1-64 letters, digits, `-`, `_`; None when it is no positive integer."""
    if not _PATH_ID.match(raw):
        raise InvalidRequest("id: must be 1 to 64 letters, digits, '-' or '_'", param="id")
    return int(raw) if raw.isdigit() and 0 < int(raw) <= MAX_ID else None


@router.get("/v1/conversations/{id}/sources")
async def conversation_sources(request: Request, id: str, key: KeyRecord = Depends(user_key)) -> Response:
    """The active sources attached to one conversation the caller owns or shares (404 otherwise)."""
    svc = services(request)
    assert key.user_id is not None
    found = await svc.conversations.access(key, parse_path_id(id))
    rows = await store.list_sources(svc.db, key.user_id, int(found.conversation["id"]))
    return _json({"success": True, "body": rows, "total": len(rows)})


@router.get("/v1/sources")
async def all_sources(request: Request, key: KeyRecord = Depends(user_key)) -> Response:
    """Every active source the caller reaches, once per conversation it is attached to."""
    svc = services(request)
    assert key.user_id is not None
    rows = await store.list_sources(svc.db, key.user_id)
    return _json({"success": True, "total": len(rows), "body": rows})


@router.patch("/v1/sources/{id}", openapi_extra={"requestBody": {"content": {"application/json": {"schema": {
    "type": "object", "properties": {"is_active": {"type": "boolean"}, "use_in_tasks": {"type": "boolean"}}}}}}})
async def patch_source(request: Request, id: str, key: KeyRecord = Depends(user_key)) -> Response:
    """Switch a source on or off for answers (`is_active`) and for tasks (`use_in_tasks`); owner only."""
    svc = services(request)
    assert key.user_id is not None
    source_id = path_integer(id)
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"Malformed JSON body: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    changes: dict[str, bool] = {}
    for name, value in body.items():
        if name not in _SWITCHES:
            raise InvalidRequest(f"{name}: unknown field (allowed: is_active, use_in_tasks)", param=name)
        if value is not None and not isinstance(value, bool):
            raise InvalidRequest(f"{name}: must be a boolean", param=name)
        if value is not None:
            changes[name] = value
    source = await store.source_reachable(svc.db, source_id, key.user_id) if source_id is not None else None
    if source is None:
        raise NotFound("Source not found", code="source_not_found")
    if source["user_id"] != key.user_id:
        raise PermissionDenied("Only the source's owner may change it", code="not_source_owner")
    updated = await store.update_source(svc.db, source["id"], changes)
    return _json({"success": True, "source": store.source_row(updated, key.user_id, None)})

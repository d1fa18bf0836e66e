"""POST /v1/auth/exchange: mint a user-scoped key (both shapes; 422 for a bad body)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from inferd.api.deps import services
from inferd.auth.exchange import refuse_user_key, require_application_key
from inferd.errors import Unprocessable
from inferd.store.db import iso
from inferd.protocol.auth import ApiKeyExchangeResponse, ExchangeEnvelope, ExchangeRequest

router = APIRouter()


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise Unprocessable(f"Malformed JSON body: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        raise Unprocessable("The body must be a JSON object")
    for name in ("idp_token", "api_key"):
        value = body.get(name)
        if value is not None and (not isinstance(value, str) or not value):
            raise Unprocessable(f"{name}: must be a non-empty string", param=name)
    ttl = body.get("ttl_seconds")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int)):
        raise Unprocessable("ttl_seconds: must be an integer or null (out-of-range values are clamped)",
                            param="ttl_seconds")
    return body


# The body is parsed here, not by FastAPI, because this route answers 422 (not 400) for a bad body.
_REQUEST_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": ExchangeRequest.model_json_schema()}}}}


@router.post("/v1/auth/exchange", tags=["auth"], openapi_extra=_REQUEST_SCHEMA,
             responses={200: {"model": ExchangeEnvelope | ApiKeyExchangeResponse}})
async def exchange(request: Request) -> Response:
    """Shape A (`idp_token`, application key in the header) or shape B (`api_key` in the body)."""
    svc = services(request)
    body = _parse(await request.body())
    ttl = body.get("ttl_seconds")
    authorization = request.headers.get("authorization")
    if body.get("api_key") is not None and body.get("idp_token") is None:
        if authorization is not None:
            # Shape B needs no header, but a key sent there is the caller's: a user key is refused
            # and a bad one is 401, as on every route.
            refuse_user_key(await svc.auth.authenticate(authorization))
        owner_key = await svc.exchange.owning_key(body["api_key"])
        await svc.limits.admit(owner_key, metered=False)
        minted = await svc.exchange.for_owner(owner_key, ttl)
        return Response(orjson.dumps({"success": True, "user_key": minted.full_key,
                                      "expires_at": iso(minted.expires_at)}), media_type="application/json")
    app_key = await svc.auth.authenticate(authorization)
    require_application_key(app_key)  # before admit: a refused key type takes no slot of the rate window
    await svc.limits.admit(app_key, metered=False)
    if body.get("idp_token") is None:
        raise Unprocessable("idp_token: field required (or send api_key for the second exchange shape)",
                            param="idp_token")
    minted = await svc.exchange.for_idp_token(app_key, body["idp_token"], ttl)
    data = {"access_key_id": minted.access_key_id, "secret": minted.secret, "full_key": minted.full_key,
            "expires_at": iso(minted.expires_at), "user_id": str(minted.user_id), "org_id": minted.org_id}
    return Response(orjson.dumps({"success": True, "data": data}), media_type="application/json")

"""POST /v1/images/generations (workspace `images`): each image is one rate-limit unit and is
priced per generation (services/images.py). Synchronous: the request stays open until the images
are ready.

What one request may ask is bounded before the limits (a refused request takes no rate-limit slot
and writes no usage row): `n` 1 to 10 and `size` at most 2048x2048 on every model, and
`num_inference_steps` at most 150 where the model (or a fallback) runs in this process, whose
time and memory grow with each of them."""

from __future__ import annotations

import re
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from inferd.api.deps import caller_key, services
from inferd.auth.principal import require_long_lived
from inferd.errors import InvalidRequest
from inferd.protocol.checks import check_model, is_int
from inferd.protocol.images import MAX_IMAGES, MAX_SIDE, ImageGenerationRequest

router = APIRouter(tags=["images"])
_SIZE = re.compile(r"^([1-9][0-9]{0,4})x([1-9][0-9]{0,4})$")


def check_image_request(body: Any) -> int:
    """The ImageGenerationRequest rules; returns `n`."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    check_model(body)
    if not isinstance(body.get("prompt"), str) or not body["prompt"]:
        raise InvalidRequest("prompt: required string", param="prompt")
    size = _SIZE.match(body["size"]) if isinstance(body.get("size"), str) else None
    if size is None:
        raise InvalidRequest("size: required, <width>x<height> of positive integers", param="size")
    if max(int(size.group(1)), int(size.group(2))) > MAX_SIDE:
        raise InvalidRequest(f"size: at most {MAX_SIDE}x{MAX_SIDE}", param="size")
    n = body.get("n", 1)
    if not is_int(n) or not 1 <= n <= MAX_IMAGES:
        raise InvalidRequest(f"n: must be an integer from 1 to {MAX_IMAGES}", param="n")
    if body.get("response_format", "b64_json") != "b64_json":
        raise InvalidRequest("response_format: only b64_json is supported", param="response_format")
    for name, ok in (("negative_prompt", lambda v: isinstance(v, str)), ("num_inference_steps", is_int),
                     ("seed", is_int), ("guidance_scale", lambda v: is_int(v) or isinstance(v, float))):
        if body.get(name) is not None and not ok(body[name]):
            raise InvalidRequest(f"{name}: wrong type", param=name)
    return int(n)


@router.post("/v1/images/generations", openapi_extra={"requestBody": {"content": {"application/json": {
    "schema": ImageGenerationRequest.model_json_schema()}}}})
async def generate(request: Request) -> Response:
    """`{created, data: [{b64_json}]}`: base64 PNGs."""
    svc = services(request)
    key = await caller_key(request)
    require_long_lived(key)
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"Malformed JSON body: {exc}", code="invalid_json") from None
    n = check_image_request(body)
    svc.images.check_steps(body, key)
    await svc.limits.admit(key, metered=True, units=n)
    reply = await svc.images.generate(key, body, n, request.scope["headers"])
    return Response(orjson.dumps(reply), media_type="application/json")

"""POST /v1/images/generations (workspace `images`): each image is one rate-limit unit and is
priced per generation. Synchronous: the request stays open until the images are ready."""

from __future__ import annotations

import re
import time
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from inferd.api.checks import check_model, is_int
from inferd.api.deps import caller_key, services
from inferd.auth.principal import require_long_lived
from inferd.calls.stage import Answer, Billing
from inferd.catalogue import Deployment, Model
from inferd.engines.base import ImageEngine
from inferd.errors import InvalidRequest
from inferd.protocol.images import ImageGenerationRequest

router = APIRouter(tags=["images"])
_SIZE = re.compile(r"^([1-9][0-9]{0,4})x([1-9][0-9]{0,4})$")


def check_image_request(body: Any) -> int:
    """The ImageGenerationRequest rules; returns `n`."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    check_model(body)
    if not isinstance(body.get("prompt"), str) or not body["prompt"]:
        raise InvalidRequest("prompt: required string", param="prompt")
    if not isinstance(body.get("size"), str) or not _SIZE.match(body["size"]):
        raise InvalidRequest("size: required, <width>x<height> of positive integers", param="size")
    n = body.get("n", 1)
    if not is_int(n) or not 1 <= n <= 10:
        raise InvalidRequest("n: must be an integer from 1 to 10", param="n")
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
    await svc.limits.admit(key, metered=True, units=n)
    model = svc.catalogue.resolve(body["model"], key)
    model.require_type(("image-gen",), "image generation")

    async def attempt(engine: ImageEngine, deployment: Deployment, answering: Model) -> Answer[dict[str, Any]]:
        upstream = deployment.config.upstream_model or deployment.config.id
        reply = await engine.images({**body, "model": upstream, "n": n, "response_format": "b64_json"})
        images = [{"b64_json": item["b64_json"]} for item in reply.get("data") or [] if isinstance(item, dict)
                  and isinstance(item.get("b64_json"), str)]
        price = deployment.config.cost.image_per_generation if deployment.config.cost else None
        return Answer({"created": int(reply.get("created") or time.time()), "data": images},
                      cost_usd=(price or 0.0) * len(images))

    affinity = request.headers.get("x-session-affinity") if model.config.routing == "affinity" else None
    metered = await svc.stage.call(model, ImageEngine, Billing(key, "images"), attempt,
                                   affinity=body.get("user") or affinity)
    return Response(orjson.dumps(metered.value), media_type="application/json")

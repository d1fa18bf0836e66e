"""Image generation (workspace `images`): a model of the catalogue, the call stage (deployment,
failover, one usage row priced per generated image), the images as base64 PNGs. Synchronous: the
call lasts until the images are ready."""

from __future__ import annotations

import time
from typing import Any, Iterable

from inferd.auth.key_record import KeyRecord
from inferd.calls.route import affinity_key
from inferd.calls.stage import Answer, Billing, CallStage
from inferd.catalogue import Deployment, Model, ModelCatalogue
from inferd.engines.base import ImageEngine
from inferd.errors import InvalidRequest
from inferd.protocol.images import MAX_STEPS_IN_PROCESS


class ImagesService:
    """catalogue -> call stage -> `{created, data: [{b64_json}]}`."""

    def __init__(self, catalogue: ModelCatalogue, stage: CallStage) -> None:
        self._catalogue = catalogue
        self._stage = stage

    def runs_in_process(self, name: str, key: KeyRecord) -> bool:
        """Whether the model `name` (when the key may use it) or one of its fallbacks has a deployment
        that runs in this process (no `base_url`). Looked up without raising: an unknown or refused
        model gets its 404 or 403 after the limits, as on every route."""
        catalogue = self._catalogue
        model = next((m for m in catalogue.models if name in (m.config.id, *m.config.aliases)), None)
        if model is None or not catalogue.allowed(key, model):
            return False
        return any(d.config.base_url is None for m in (model, *catalogue.fallbacks(model, key))
                   for d in m.deployments)

    def check_steps(self, body: dict[str, Any], key: KeyRecord) -> None:
        """`num_inference_steps` from 1 to 150 on a model generated in this process, whose time and
        memory grow with them (checked before the limits: a refused request takes no slot)."""
        steps = body.get("num_inference_steps")
        if steps is not None and not 1 <= steps <= MAX_STEPS_IN_PROCESS and self.runs_in_process(body["model"], key):
            raise InvalidRequest(f"num_inference_steps: must be from 1 to {MAX_STEPS_IN_PROCESS} on model "
                                 f"'{body['model']}'", param="num_inference_steps")

    async def generate(self, key: KeyRecord, body: dict[str, Any], n: int, headers: Iterable[tuple[bytes, bytes]]
                       ) -> dict[str, Any]:
        """`n` images for a checked, admitted request (`headers`: the raw ones, for the affinity key)."""
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(("image-gen",), "image generation")

        async def attempt(engine: ImageEngine, deployment: Deployment, answering: Model) -> Answer[dict[str, Any]]:
            reply = await engine.images({**body, "model": deployment.upstream, "n": n, "response_format": "b64_json"})
            images = [{"b64_json": item["b64_json"]} for item in reply.get("data") or [] if isinstance(item, dict)
                      and isinstance(item.get("b64_json"), str)]
            price = deployment.config.cost.image_per_generation if deployment.config.cost else None
            return Answer({"created": int(reply.get("created") or time.time()), "data": images},
                          cost_usd=(price or 0.0) * len(images))

        return (await self._stage.call(model, ImageEngine, Billing(key, "images"), attempt,
                                       affinity=affinity_key(model, body.get("user"), headers=headers))).value

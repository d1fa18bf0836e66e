"""POST /v1/embeddings: a raw ASGI handler (hot path). Only `model` and the number of inputs are
checked here; the embeddings service does the rest (services/embeddings.py)."""

from __future__ import annotations

from typing import Any, Awaitable, Iterable

from inferd.api.hot import ServiceRoute
from inferd.auth.key_record import KeyRecord
from inferd.errors import InvalidRequest
from inferd.protocol.checks import check_model, is_int
from inferd.services.embeddings import EmbeddingsService


MAX_INPUTS = 2048  # per request: one call is a bounded amount of work


def check_embeddings(body: dict[str, Any]) -> None:
    """`model` as the spec validates it, and at most 2048 entries in an `input` array."""
    check_model(body)
    inputs = body.get("input")
    # An array of integers is one input already tokenized (the OpenAI shape), not many inputs.
    if isinstance(inputs, list) and len(inputs) > MAX_INPUTS and not all(is_int(i) for i in inputs):
        raise InvalidRequest(f"input: at most {MAX_INPUTS} inputs per request, got {len(inputs)}", param="input")


class EmbeddingsRoute(ServiceRoute[EmbeddingsService]):
    """check -> limits -> embeddings service (catalogue, call stage: deployment, failover, usage row
    in workspace embeddings)."""

    check = staticmethod(check_embeddings)

    def answer(self, key: KeyRecord, body: dict[str, Any], headers: Iterable[tuple[bytes, bytes]]
               ) -> Awaitable[dict[str, Any]]:
        """The embeddings, in the encoding asked for."""
        return self.service.create(key, body, headers)

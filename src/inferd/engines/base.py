"""The Engine interface every model backend implements, and token-count helpers they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Protocol, runtime_checkable

import orjson


@dataclass(frozen=True)
class TokenCount:
    """A prompt's size in tokens; `exact` is False for estimates."""

    input_tokens: int
    context_window: int | None
    exact: bool


class Engine(Protocol):
    """What every engine is: something holding connections or memory until closed. What it can do
    is the capability protocols below; a deployment hands out its engine as the one its model's
    type needs (`inferd.catalogue.Deployment.serving`).

    Payloads are OpenAI-shaped dicts with `model` already set for upstream. Failures raise
    `inferd.errors` exceptions: RelayedError for the model's own rejections, EngineTimeout /
    EngineUnavailable / EngineError otherwise (the call stage fails over on those, and on 429)."""

    async def close(self) -> None:
        """Release connections and memory."""


@runtime_checkable
class ChatEngine(Engine, Protocol):
    """An engine serving `chat` and `vision-chat` models.

    `chat_stream` yields lists of SSE event data (the JSON bytes of one chunk each: every event
    that arrived together, so a busy relay handles them in one go) and stops at `[DONE]`; closing
    the iterator aborts the generation. A batch may end with `b"[DONE]"` itself, when the engine
    already knows it is the last: the relay then ends the stream without waiting on the iterator."""

    base_parameters: tuple[str, ...]

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One blocking chat completion."""

    def chat_stream(self, payload: dict[str, Any]) -> AsyncIterator[list[bytes]]:
        """A streamed chat completion: batches of chunks' JSON bytes, never empty."""

    async def count_tokens(self, payload: dict[str, Any]) -> TokenCount:
        """The prompt tokens `payload` would be billed, as the chat template renders it."""


@runtime_checkable
class EmbeddingEngine(Engine, Protocol):
    """An engine serving `embeddings` models."""

    async def embed(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The OpenAI embeddings response (`data[].embedding` as floats, `usage.prompt_tokens`)."""


@runtime_checkable
class RerankEngine(Engine, Protocol):
    """An engine serving `reranker` models."""

    async def rerank(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`{results: [{index, relevance_score}], usage?}` for `{model, query, documents, top_n}`."""


@runtime_checkable
class SpeechEngine(Engine, Protocol):
    """An engine serving `tts` models."""

    async def speech(self, payload: dict[str, Any]) -> tuple[bytes, str]:
        """(audio bytes, content type) for an OpenAI speech request."""

    async def voices(self) -> Any:
        """The voices the engine offers, as it lists them."""


@runtime_checkable
class TranscriptionEngine(Engine, Protocol):
    """An engine serving `asr` models."""

    async def transcribe(self, path: str, filename: str, fields: dict[str, str]) -> dict[str, Any]:
        """`{text, language?, duration?, segments?, body?}` for the audio file at `path`."""


@runtime_checkable
class ImageEngine(Engine, Protocol):
    """An engine serving `image-gen` models."""

    async def images(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The OpenAI images response for a generation request."""


# What each model type's deployments must serve (types not listed: ocr models, served by nothing yet).
CAPABILITY_OF_TYPE: dict[str, type[Engine]] = {
    "chat": ChatEngine, "vision-chat": ChatEngine, "embeddings": EmbeddingEngine, "reranker": RerankEngine,
    "tts": SpeechEngine, "asr": TranscriptionEngine, "image-gen": ImageEngine,
}


def _text_bytes(content: Any) -> int:
    if isinstance(content, str):
        return len(content.encode("utf-8"))
    if isinstance(content, list):
        total = 0
        for part in content:
            if isinstance(part, dict):
                total += len(str(part.get("text", "")).encode("utf-8"))
                if part.get("type") == "image_url":
                    total += 4096  # images cost a model-dependent number of tokens; stay above it
        return total
    return 0


def prompt_upper_bound(payload: dict[str, Any]) -> int:
    """A cheap bound no tokenizer exceeds: byte-level BPE spends at least one byte per token, and
    the chat template adds a bounded number of special tokens per message and for tool definitions."""
    total = 64
    for message in payload.get("messages") or ():
        total += 16 + _text_bytes(message.get("content"))
        if message.get("tool_calls"):
            total += len(orjson.dumps(message["tool_calls"]))
        if message.get("name"):
            total += len(str(message["name"]))
    if payload.get("tools"):
        total += 1024 + len(orjson.dumps(payload["tools"]))
    return total


def estimate_tokens(payload: dict[str, Any]) -> int:
    """A rough count for engines without a tokenizer: about four bytes a token plus template tokens."""
    total = 3
    for message in payload.get("messages") or ():
        total += 4 + (_text_bytes(message.get("content")) + 3) // 4
        if message.get("tool_calls"):
            total += len(orjson.dumps(message["tool_calls"])) // 4
    if payload.get("tools"):
        total += 16 + len(orjson.dumps(payload["tools"])) // 4
    return total

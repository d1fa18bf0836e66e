"""The chat corridor after the limits: catalogue, thinking rules, context fit, engine, metering.

The HTTP route, the batch worker and conversation turns all call this, so a chat is routed and
billed the same way wherever it comes from.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import orjson

from inferd.api.checks import check_reasoning_effort
from inferd.catalogue import CHAT_TYPES, Deployment, ModelCatalogue
from inferd.engines.base import estimate_tokens, prompt_upper_bound
from inferd.errors import InferdError, InvalidRequest
from inferd.metering import UsageWriter, usage_for
from inferd.store.keys import KeyRecord

CLIENT_CLOSED = 499  # status on the usage row of a stream the client abandoned
# Deltas that carry no token: the opening role chunk and the closing finish chunk.
_EMPTY_DELTAS = (b'"content":""', b'"content": ""', b'"delta":{}', b'"delta": {}')


@dataclass
class ChatCall:
    """One chat request on its way through the corridor."""

    key: KeyRecord
    deployment: Deployment
    payload: dict[str, Any]  # the body sent upstream
    metadata: dict[str, str] | None
    workspace: str = "chat"
    price_factor: float = 1.0
    started: float = field(default_factory=time.perf_counter)
    prompt_count: int | None = None


def apply_thinking(deployment: Deployment, payload: dict[str, Any]) -> None:
    """Normalise `reasoning_effort` and apply the model's thinking mode (CONTRACT.md `thinking`)."""
    effort = check_reasoning_effort(payload)
    mode = deployment.config.thinking
    if effort is None or mode == "none":
        payload.pop("reasoning_effort", None)
        return
    if mode == "always" and effort == "off":
        raise InvalidRequest(f"reasoning_effort: model '{deployment.id}' always thinks; 'off' is not accepted",
                             param="reasoning_effort")
    if mode == "never" and effort != "off":
        raise InvalidRequest(f"reasoning_effort: model '{deployment.id}' has no thinking mode; only 'off' is "
                             "accepted", param="reasoning_effort")
    payload["reasoning_effort"] = effort


def _usage_numbers(usage: Any) -> tuple[int, int, int] | None:
    if not isinstance(usage, dict):
        return None
    try:
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details")
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    except (TypeError, ValueError):
        return None
    return prompt, completion, cached


def _with_reasoning(holder: dict[str, Any]) -> None:
    """Expose an engine's `reasoning_content` as the spec's `reasoning`."""
    if "reasoning_content" in holder and holder.get("reasoning") is None:
        holder["reasoning"] = holder["reasoning_content"]


class ChatService:
    """Routes, runs and meters chat completions."""

    def __init__(self, catalogue: ModelCatalogue, writer: UsageWriter) -> None:
        self._catalogue = catalogue
        self._writer = writer

    def open(self, body: dict[str, Any], key: KeyRecord, *, workspace: str = "chat",
             price_factor: float = 1.0, metadata: dict[str, str] | None = None) -> ChatCall:
        """Resolve the model and build the upstream payload (metadata never goes upstream)."""
        deployment = self._catalogue.resolve(body["model"], key)
        deployment.require_type(CHAT_TYPES, "chat completions")
        payload = dict(body)
        payload.pop("metadata", None)
        payload["model"] = deployment.config.upstream_model or deployment.id
        if payload.get("top_p") is None:
            payload["top_p"] = 1.0  # the spec's default, whatever the engine's own would be
        apply_thinking(deployment, payload)
        if payload.get("stream"):
            options = payload.get("stream_options")
            # Ask for usage even when the client did not: the final chunk must carry it.
            payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return ChatCall(key, deployment, payload, metadata, workspace, price_factor)

    async def fit_context(self, call: ChatCall) -> None:
        """400 when the prompt overflows the window; cap max_tokens at the room left.

        A count is taken only when the cheap upper bound cannot rule both out."""
        window = call.deployment.config.context_length
        if window is None:
            return
        payload = call.payload
        limit_field = "max_tokens" if payload.get("max_tokens") is not None else "max_completion_tokens"
        max_tokens = payload.get(limit_field)
        bound = prompt_upper_bound(payload)
        if bound + (max_tokens or 0) <= window or (max_tokens is None and bound < window):
            return
        count = (await call.deployment.engine.count_tokens(payload)).input_tokens
        call.prompt_count = count
        if count >= window:
            raise InvalidRequest(f"messages: the prompt is {count} tokens, which exceeds the {window}-token "
                                 f"context window of model '{call.deployment.id}'", code="context_length_exceeded",
                                 param="messages")
        if isinstance(max_tokens, int) and count + max_tokens > window:
            payload[limit_field] = window - count

    async def _meter(self, call: ChatCall, status: int, prompt: int, completion: int, cached: int) -> None:
        await self._writer.record(usage_for(call.key, call.deployment.config, call.workspace, status, prompt,
                                            completion, started=call.started, cached=cached, metadata=call.metadata,
                                            price_factor=call.price_factor))

    async def _prompt_tokens(self, call: ChatCall) -> int:
        """The prompt's size when the engine reported none (estimate if counting fails)."""
        if call.prompt_count is not None:
            return call.prompt_count
        try:
            return (await asyncio.wait_for(call.deployment.engine.count_tokens(call.payload), 10)).input_tokens
        except (InferdError, asyncio.TimeoutError):
            return estimate_tokens(call.payload)

    async def complete(self, call: ChatCall) -> dict[str, Any]:
        """A blocking completion, metered (committed) before it is returned."""
        self._writer.active += 1
        try:
            return await self._complete(call)
        finally:
            self._writer.active -= 1

    async def _complete(self, call: ChatCall) -> dict[str, Any]:
        try:
            body = await call.deployment.engine.chat(call.payload)
        except InferdError as exc:
            await self._meter(call, exc.status, 0, 0, 0)
            raise
        numbers = _usage_numbers(body.get("usage"))
        if numbers is None:
            text = "".join(str((c.get("message") or {}).get("content") or "") for c in body["choices"]
                           if isinstance(c, dict))
            numbers = (await self._prompt_tokens(call), (len(text.encode()) + 3) // 4, 0)
            body["usage"] = {"prompt_tokens": numbers[0], "completion_tokens": numbers[1],
                             "total_tokens": numbers[0] + numbers[1]}
        body["model"] = call.deployment.id
        for choice in body["choices"]:
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                _with_reasoning(choice["message"])
        await self._meter(call, 200, *numbers)
        return body

    def stream(self, call: ChatCall) -> AsyncIterator[bytes]:
        """SSE frames for a streamed completion; the row is committed before `data: [DONE]`."""
        return _StreamRelay(self, call).frames()


class _StreamRelay:
    """Relays one upstream stream, watching for usage and counting deltas as it goes."""

    def __init__(self, service: ChatService, call: ChatCall) -> None:
        self._service = service
        self._call = call
        upstream_name = call.payload["model"]
        self._rename: tuple[tuple[bytes, bytes], ...] = ()
        if upstream_name != call.deployment.id:
            old, new = orjson.dumps(upstream_name), orjson.dumps(call.deployment.id)
            self._rename = ((b'"model":' + old, b'"model":' + new), (b'"model": ' + old, b'"model": ' + new))
        self._usage: tuple[int, int, int] | None = None
        self._deltas = 0
        self._metered = False
        self._chunk_head: dict[str, Any] | None = None  # id and created of the first chunk

    def _transform(self, data: bytes) -> bytes:
        if self._chunk_head is None:
            try:
                first = orjson.loads(data)
                self._chunk_head = {"id": first.get("id"), "created": first.get("created")}
            except (orjson.JSONDecodeError, AttributeError):
                self._chunk_head = {}
        for old, new in self._rename:
            if old in data:
                data = data.replace(old, new)
                break
        if b'"usage"' in data and b'"usage":null' not in data and b'"usage": null' not in data:
            try:
                self._usage = _usage_numbers(orjson.loads(data).get("usage")) or self._usage
            except (orjson.JSONDecodeError, AttributeError):
                pass
        if b'"delta"' in data and not any(empty in data for empty in _EMPTY_DELTAS):
            self._deltas += 1  # about one token per delta, should the upstream report no usage
        if b'"reasoning_content"' in data:
            try:
                chunk = orjson.loads(data)
                for choice in chunk.get("choices") or ():
                    if isinstance(choice.get("delta"), dict):
                        _with_reasoning(choice["delta"])
                data = orjson.dumps(chunk)
            except (orjson.JSONDecodeError, AttributeError):
                pass
        return b"data: " + data + b"\n\n"

    async def _meter(self, status: int) -> None:
        self._metered = True
        if self._usage is None:
            # Interrupted or usage-less streams: each delta carried about one token.
            self._usage = (await self._service._prompt_tokens(self._call), self._deltas, 0)
        await self._service._meter(self._call, status, *self._usage)

    def _usage_frame(self) -> bytes:
        """The final usage chunk, for an upstream that sent none."""
        assert self._usage is not None
        prompt, completion, _ = self._usage
        chunk = {**(self._chunk_head or {}), "object": "chat.completion.chunk", "model": self._call.deployment.id,
                 "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                          "total_tokens": prompt + completion}}
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    async def frames(self) -> AsyncIterator[bytes]:
        """The frames to send; errors before the first frame propagate as exceptions."""
        events = self._call.deployment.engine.chat_stream(self._call.payload)
        started = False
        writer = self._service._writer
        writer.active += 1
        try:
            async for batch in events:
                started = True
                yield b"".join([self._transform(data) for data in batch])
            reported = self._usage is not None
            await self._meter(200)
            yield b"data: [DONE]\n\n" if reported else self._usage_frame() + b"data: [DONE]\n\n"
        except InferdError as exc:
            if not started:  # nothing produced: the failed call costs nothing
                self._metered = True
                await self._service._meter(self._call, exc.status, 0, 0, 0)
                raise
            if not self._metered:
                await self._meter(exc.status)
            error = {"message": exc.message, "type": "engine_error", "code": exc.code}
            yield b"data: " + orjson.dumps({"error": error}) + b"\n\n"
        finally:
            await events.aclose()  # type: ignore[attr-defined]
            if not self._metered:  # the client went away: bill what was produced
                await self._meter(CLIENT_CLOSED)
            writer.active -= 1

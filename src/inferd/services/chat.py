"""The chat corridor after the limits: catalogue, thinking rules, context fit, engine, metering.

The HTTP route, the batch worker and conversation turns all call this, so a chat is routed and
billed the same way wherever it comes from.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterable

import orjson

from inferd.auth.key_record import KeyRecord
from inferd.calls.pacing import Pacer
from inferd.calls.route import affinity_key
from inferd.calls.stage import Answer, Billing, CallStage, Metered, StreamLease
from inferd.catalogue import CHAT_TYPES, Deployment, Model, ModelCatalogue
from inferd.engines.base import ChatEngine, TokenCount, estimate_tokens, prompt_upper_bound
from inferd.errors import InferdError, InvalidRequest
from inferd.guardrails.policy import Guardrails, OutputStream, Policy, texts_of
from inferd.protocol.chat import check_images, check_reasoning_effort

CLIENT_CLOSED = 499  # status on the usage row of a stream the client abandoned
# The text of a reply the output guardrails read: the answer and the reasoning, in either name.
TEXT_FIELDS = ("content", "reasoning_content", "reasoning")
DONE_FRAME = b"data: [DONE]\n\n"  # a stream's last SSE frame
# Deltas that carry no token: the opening role chunk and the closing finish chunk.
_EMPTY_DELTAS = (b'"content":""', b'"content": ""', b'"delta":{}', b'"delta": {}')


@dataclass(slots=True)
class ChatCall:
    """One chat request on its way through the corridor."""

    key: KeyRecord
    model: Model
    payload: dict[str, Any]  # the body sent upstream (`model`: the first deployment's; `payload_for` each)
    metadata: dict[str, str] | None
    workspace: str = "chat"
    price_factor: float = 1.0
    prompt_count: int | None = None
    affinity: str | None = None  # the routing key of `affinity` pools
    guard: Policy | None = None  # the guardrails of the caller's org; None: none apply
    guarded: bool = False  # whether the input guardrails have run (they run once, before any engine)

    @property
    def billing(self) -> Billing:
        """Who pays, in which workspace, at which rate."""
        return Billing(self.key, self.workspace, self.price_factor, self.metadata)

    def payload_for(self, deployment: Deployment) -> dict[str, Any]:
        """The upstream body for one deployment: its own upstream model name (`payload` itself when
        it already names it, as it does for the first deployment: no copy on the hot path)."""
        name = deployment.upstream
        return self.payload if self.payload.get("model") == name else {**self.payload, "model": name}


def apply_thinking(deployment: Model, payload: dict[str, Any]) -> None:
    """Normalise `reasoning_effort` and apply the model's thinking mode (docs/configuration.md, `thinking`)."""
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
    """Routes, runs and meters chat completions through the call stage."""

    def __init__(self, catalogue: ModelCatalogue, stage: CallStage, guardrails: Guardrails | None = None) -> None:
        self._catalogue = catalogue
        self._stage = stage
        self._guardrails = guardrails

    def _policy(self, key: KeyRecord) -> Policy | None:
        return self._guardrails.policy(key.org_slug, key.org_guardrails) if self._guardrails is not None else None

    async def guard_input(self, call: ChatCall) -> None:
        """Run the input guardrails once, before any engine sees the messages: 400
        `guardrail_blocked`, or the matched spans replaced in the upstream payload."""
        call.guarded = True
        policy = call.guard
        if policy is None or not policy.input:
            return
        messages = [dict(m) if isinstance(m, dict) else m for m in call.payload.get("messages") or ()]
        places = texts_of(messages)
        if not places:
            return
        texts = [messages[i]["content"] if j is None else messages[i]["content"][j]["text"] for i, j in places]
        checked = await policy.check_input(texts, call.model.id, call.key.org_slug)
        for (i, j), before, after in zip(places, texts, checked):
            if after == before:
                continue
            if j is None:
                messages[i]["content"] = after
            else:
                parts = messages[i]["content"] = list(messages[i]["content"])
                parts[j] = {**parts[j], "text": after}
        call.payload["messages"] = messages
        call.prompt_count = None  # a count of the text before redaction is not the prompt billed

    async def guard_output(self, call: ChatCall, reply: dict[str, Any]) -> None:
        """Run the output guardrails over a blocking reply's text and reasoning: a blocked message
        is withheld (`finish_reason` `content_filter`), a redacted one replaced."""
        policy = call.guard
        if policy is None or not policy.output:
            return
        for choice in reply.get("choices") or ():
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            fields = [name for name in TEXT_FIELDS if isinstance(message.get(name), str) and message[name]]
            if not fields:
                continue
            verdict = await policy.check("output", [message[name] for name in fields], call.model.id,
                                         call.key.org_slug)
            if verdict.blocked_by is not None:
                for name in fields:
                    message[name] = "" if name == "content" else None
                message.pop("tool_calls", None)
                choice["finish_reason"] = "content_filter"
            else:
                message.update(zip(fields, verdict.texts))

    def open(self, body: dict[str, Any], key: KeyRecord, *, workspace: str = "chat",
             price_factor: float = 1.0, metadata: dict[str, str] | None = None,
             affinity: str | None = None) -> ChatCall:
        """Resolve the model and build the upstream payload (metadata never goes upstream)."""
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(CHAT_TYPES, "chat completions")
        config = model.config
        if config.image_urls != "any" or "image_input" not in config.capabilities:
            # The one place every dialect's images pass (chat, messages, responses, batch lines).
            check_images(body.get("messages") or (), model.id, "image_input" in config.capabilities,
                         config.image_urls == "data-only")
        payload = dict(body)
        payload.pop("metadata", None)
        payload["model"] = model.deployments[0].upstream
        if payload.get("top_p") is None:
            payload["top_p"] = 1.0  # the spec's default, whatever the engine's own would be
        apply_thinking(model, payload)
        if payload.get("stream"):
            options = payload.get("stream_options")
            # Ask for usage even when the client did not: the final chunk must carry it.
            payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return ChatCall(key, model, payload, metadata, workspace, price_factor,
                        affinity=affinity_key(model, body.get("user"), affinity), guard=self._policy(key))

    def open_count(self, body: dict[str, Any], key: KeyRecord, headers: Iterable[tuple[bytes, bytes]] = ()
                   ) -> ChatCall:
        """The call `/v1/chat/count_tokens` counts: the payload a completion of `body` would send
        (its messages, tools and thinking), so the count equals the billed prompt (`headers`: the
        raw ones, for the affinity key)."""
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(CHAT_TYPES, "token counting")
        payload: dict[str, Any] = {"messages": body["messages"]}
        if body.get("tools"):
            payload["tools"] = body["tools"]
        if body.get("reasoning_effort") is not None:
            payload["reasoning_effort"] = body["reasoning_effort"]
        apply_thinking(model, payload)
        payload["model"] = model.deployments[0].upstream
        return ChatCall(key, model, payload, None, affinity=affinity_key(model, body.get("user"), headers=headers),
                        guard=self._policy(key))

    async def token_count(self, call: ChatCall) -> TokenCount:
        """The prompt's size as a deployment of the model tokenizes it (failing over, never
        metered): what every count_tokens route answers."""
        async def attempt(engine: ChatEngine, deployment: Deployment, model: Model) -> TokenCount:
            return await engine.count_tokens(call.payload_for(deployment))

        if call.guard is not None and not call.guarded:
            await self.guard_input(call)  # the count is of the prompt a completion would bill
        return await self._stage.unmetered(call.model, ChatEngine, call.key, attempt, affinity=call.affinity)

    async def count(self, call: ChatCall) -> int:
        """The prompt's exact size (`token_count`'s number)."""
        return (await self.token_count(call)).input_tokens

    async def count_payload(self, model: Model, key: KeyRecord, payload: dict[str, Any]) -> int:
        """The exact prompt tokens of a chat payload on `model` (never metered)."""
        return await self.count(ChatCall(key, model, payload, None))

    async def fit_context(self, call: ChatCall) -> None:
        """400 when the prompt overflows the window; cap max_tokens at the room left.

        A count is taken only when the cheap upper bound cannot rule both out."""
        if call.guard is not None and not call.guarded:
            await self.guard_input(call)
        window = call.model.config.context_length
        if window is None:
            return
        payload = call.payload
        limit_field = "max_tokens" if payload.get("max_tokens") is not None else "max_completion_tokens"
        max_tokens = payload.get(limit_field)
        bound = prompt_upper_bound(payload)
        if bound + (max_tokens or 0) <= window or (max_tokens is None and bound < window):
            return
        count = await self.count(call)
        call.prompt_count = count
        if count >= window:
            raise InvalidRequest(f"messages: the prompt is {count} tokens, which exceeds the {window}-token "
                                 f"context window of model '{call.model.id}'", code="context_length_exceeded",
                                 param="messages")
        if isinstance(max_tokens, int) and count + max_tokens > window:
            payload[limit_field] = window - count

    async def prompt_tokens(self, call: ChatCall, engine: ChatEngine, deployment: Deployment) -> int:
        """The prompt's size when the engine reported none (estimate if counting fails)."""
        if call.prompt_count is not None:
            return call.prompt_count
        try:
            return (await asyncio.wait_for(engine.count_tokens(call.payload_for(deployment)), 10)).input_tokens
        except (InferdError, asyncio.TimeoutError):
            return estimate_tokens(call.payload)

    async def complete(self, call: ChatCall, *, record: bool = True,
                       pacer: Pacer | None = None) -> Metered[dict[str, Any]]:
        """A blocking completion and its usage, metered (committed, unless `record` is False: then
        the caller commits `usage`) before it is returned; `pacer` caps such calls per deployment
        (batch lines)."""
        async def attempt(engine: ChatEngine, deployment: Deployment, model: Model) -> Answer[dict[str, Any]]:
            body = await engine.chat(call.payload_for(deployment))
            numbers = _usage_numbers(body.get("usage"))
            if numbers is None:
                text = "".join(str((c.get("message") or {}).get("content") or "") for c in body["choices"]
                               if isinstance(c, dict))
                numbers = (await self.prompt_tokens(call, engine, deployment), (len(text.encode()) + 3) // 4, 0)
                body["usage"] = {"prompt_tokens": numbers[0], "completion_tokens": numbers[1],
                                 "total_tokens": numbers[0] + numbers[1]}
            body["model"] = model.id
            for choice in body["choices"]:
                if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                    _with_reasoning(choice["message"])
            return Answer(body, *numbers)

        if call.guard is not None and not call.guarded:
            await self.guard_input(call)
        metered = await self._stage.call(call.model, ChatEngine, call.billing, attempt, affinity=call.affinity,
                                         record=record, pacer=pacer)
        if call.guard is not None:
            await self.guard_output(call, metered.value)
        return metered

    def stream(self, call: ChatCall) -> AsyncIterator[bytes]:
        """SSE frames for a streamed completion; the row is durable before `data: [DONE]`.
        Errors before the first frame propagate as exceptions (after failover)."""
        return _StreamRelay(self, call).frames()

    def chunks(self, call: ChatCall) -> AsyncIterator[dict[str, Any]]:
        """The same stream as parsed chunks, for callers inside the server (generate turns); the
        usage row is durable before the iterator ends, and an error after the first chunk comes
        as a chunk holding `error`."""
        return _StreamRelay(self, call).chunks()

    def chunk_batches(self, call: ChatCall) -> AsyncIterator[list[bytes]]:
        """The same stream as the chunks' JSON bytes, every chunk that arrived together in one list,
        so a relay that re-encodes them (the Messages API) sends one write per batch; otherwise as
        `chunks`."""
        return _StreamRelay(self, call).chunk_batches()

    async def open_stream(self, call: ChatCall) -> StreamLease:
        """The call stage's stream for `call`: started on the first deployment that answered."""
        if call.guard is not None and not call.guarded:
            await self.guard_input(call)
        return await self._stage.open_stream(
            call.model, call.billing,
            lambda engine, deployment, model: engine.chat_stream(call.payload_for(deployment)),
            affinity=call.affinity)


class _ReplyGuard:
    """A streamed reply's texts through the output guardrails: the answer and the reasoning each
    in its own `OutputStream` (each holds back only what a match can span)."""

    def __init__(self, policy: Policy, model: str, org: str) -> None:
        self._policy = policy
        self._model = model
        self._org = org
        self._streams: dict[str, OutputStream] = {}

    def stream(self, field: str) -> OutputStream:
        """The filter of one text field (made when the field first comes)."""
        found = self._streams.get(field)
        if found is None:
            found = self._streams[field] = self._policy.output_stream(self._model, self._org)
        return found

    @property
    def blocked_by(self) -> str | None:
        return next((s.blocked_by for s in self._streams.values() if s.blocked_by is not None), None)

    async def flush(self) -> list[tuple[str, str]]:
        """What each field still held, at the end of the reply (nothing of a field once blocked)."""
        rests = []
        for field, stream in self._streams.items():
            rest = await stream.flush()
            if rest:
                rests.append((field, rest))
        return rests


class _StreamRelay:
    """Relays one upstream stream, watching for usage and counting deltas as it goes."""

    def __init__(self, service: ChatService, call: ChatCall) -> None:
        self._service = service
        self._call = call
        self._rename: tuple[tuple[bytes, bytes], ...] = ()
        self._usage: tuple[int, int, int] | None = None
        self._deltas = 0
        self._uncounted: list[bytes] = []  # batches whose deltas are counted only if no usage comes
        self._uncounted_bytes = 0
        self._lease: StreamLease | None = None
        self._chunk_head: dict[str, Any] | None = None  # id and created of the first chunk
        self._flushed = False  # whether the output guardrails gave up what they held back

    async def _guarded(self, batch: list[bytes], guard: "_ReplyGuard", end: bool) -> list[bytes]:
        """A batch of events through the output guardrails: each text delta (answer or reasoning)
        as much of it as may be sent now; the held-back rest with the finish chunk (or, `end`, in a
        chunk of its own); once a guardrail blocks, the text before the match and a finish chunk
        with `content_filter`, and nothing after it."""
        out: list[bytes] = []
        for data in batch:
            chunk = orjson.loads(data)
            choices = chunk.get("choices") if isinstance(chunk, dict) else None
            if not choices:
                out.append(data)  # the usage chunk, which carries no text
                continue
            choice = choices[0]
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                delta = choice["delta"] = {}
            for name in TEXT_FIELDS:
                if isinstance(delta.get(name), str) and delta[name]:
                    delta[name] = guard.stream(name).feed(delta[name])
            if choice.get("finish_reason") and guard.blocked_by is None and not self._flushed:
                self._flushed = True
                for name, rest in await guard.flush():
                    delta[name] = (delta.get(name) or "") + rest
            if guard.blocked_by is not None:
                delta.pop("tool_calls", None)
                choice["finish_reason"] = "content_filter"
                out.append(orjson.dumps(chunk))
                return out
            out.append(orjson.dumps(chunk))
        if end and not self._flushed:
            self._flushed = True
            delta = dict(await guard.flush())
            if delta or guard.blocked_by is not None:
                out.append(orjson.dumps({**(self._chunk_head or {}), "object": "chat.completion.chunk",
                                         "model": self._call.model.id, "choices": [{
                                             "index": 0, "delta": delta,
                                             "finish_reason": "content_filter" if guard.blocked_by else None}]}))
        return out

    def _renaming(self, lease: StreamLease) -> None:
        """Chunks name the upstream model; the client sees the model that answered."""
        upstream_name = lease.deployment.upstream
        if upstream_name != lease.model.id:
            old, new = orjson.dumps(upstream_name), orjson.dumps(lease.model.id)
            self._rename = ((b'"model":' + old, b'"model":' + new), (b'"model": ' + old, b'"model": ' + new))

    def _head(self, first: bytes) -> None:
        try:
            chunk = orjson.loads(first)
            self._chunk_head = {"id": chunk.get("id"), "created": chunk.get("created")}
        except (orjson.JSONDecodeError, AttributeError):
            self._chunk_head = {}

    def _note_usage(self, data: bytes) -> bool:
        """Take the usage an event carries; whether it carried one."""
        if b'"usage"' in data and b'"usage":null' not in data and b'"usage": null' not in data:
            try:
                numbers = _usage_numbers(orjson.loads(data).get("usage"))
            except (orjson.JSONDecodeError, AttributeError):
                return False
            if numbers:
                self._usage = numbers
                return True
        return False

    def _note(self, scanned: bytes, batch: list[bytes]) -> None:
        """Take what the meter needs from a batch of events (`scanned` is them joined): the first
        chunk's id, and the last usage any carries. Each check runs once over the batch (most of a
        stream's events arrive together): event by event they were a tenth of a busy relay."""
        if self._chunk_head is None:
            self._head(batch[0])
        usages = scanned.count(b'"usage"')
        if usages and usages > scanned.count(b'"usage":null') + scanned.count(b'"usage": null'):
            for data in reversed(batch):
                if self._note_usage(data):
                    break
        if self._usage is None:
            # Should the stream end without usage, each delta counts about one token. Most
            # upstreams report usage, so the batches are counted then, not as they pass (a
            # bounded backlog: past 256 KiB they are counted and dropped).
            self._uncounted.append(scanned)
            self._uncounted_bytes += len(scanned)
            if self._uncounted_bytes > 1 << 18:
                self._count_deltas()

    def _count_deltas(self) -> None:
        """Add the deltas of the batches kept so far, less the empty ones (an event holds one delta
        and at most one empty form)."""
        for scanned in self._uncounted:
            self._deltas += scanned.count(b'"delta"') - sum(scanned.count(empty) for empty in _EMPTY_DELTAS)
        self._uncounted.clear()
        self._uncounted_bytes = 0

    def _event(self, data: bytes) -> bytes:
        """One event as the client gets it: the model renamed, reasoning exposed."""
        for old, new in self._rename:
            if old in data:
                data = data.replace(old, new)
                break
        if b'"reasoning_content"' in data:
            try:
                chunk = orjson.loads(data)
                for choice in chunk.get("choices") or ():
                    if isinstance(choice.get("delta"), dict):
                        _with_reasoning(choice["delta"])
                data = orjson.dumps(chunk)
            except (orjson.JSONDecodeError, AttributeError):
                pass
        return data

    def _sse(self, batch: list[bytes]) -> bytes:
        """A batch of events as SSE frames."""
        body = b"data: " + b"\n\ndata: ".join(batch) + b"\n\n"
        self._note(body, batch)
        if b'"reasoning_content"' in body:
            return b"".join([b"data: " + self._event(data) + b"\n\n" for data in batch])
        for old, new in self._rename:
            body = body.replace(old, new)
        return body

    def _events(self, batch: list[bytes]) -> list[bytes]:
        """A batch of events as the chunks' JSON bytes."""
        self._note(batch[0] if len(batch) == 1 else b"\n".join(batch), batch)
        return [self._event(data) for data in batch]

    async def _meter(self, lease: StreamLease, status: int) -> None:
        if self._usage is None:
            # Interrupted or usage-less streams: each delta carried about one token.
            self._count_deltas()
            engine = lease.deployment.serving(ChatEngine)
            self._usage = (await self._service.prompt_tokens(self._call, engine, lease.deployment), self._deltas, 0)
        await lease.finish(status, *self._usage)

    def _usage_chunk(self, lease: StreamLease) -> bytes:
        """The final usage chunk, for an upstream that sent none."""
        assert self._usage is not None
        prompt, completion, _ = self._usage
        chunk = {**(self._chunk_head or {}), "object": "chat.completion.chunk", "model": lease.model.id,
                 "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                          "total_tokens": prompt + completion}}
        return orjson.dumps(chunk)

    def frames(self) -> AsyncIterator[bytes]:
        """The SSE frames to send, the usage chunk (when the upstream sent none) and `data: [DONE]`
        last, or an error frame when the stream broke after it started. Errors before the first
        frame propagate as exceptions (already metered by the call stage)."""
        return self._relay(True)

    async def chunks(self) -> AsyncIterator[dict[str, Any]]:
        """The same stream as parsed chunks (an error as `{"error": ...}`, no `[DONE]`), for callers
        inside the server: the chunks' JSON is parsed once, never wrapped as SSE and split again."""
        batches = self._relay(False)
        try:
            async for batch in batches:
                for data in batch:
                    yield orjson.loads(data)
        finally:
            await batches.aclose()  # type: ignore[attr-defined]

    def chunk_batches(self) -> AsyncIterator[list[bytes]]:
        """Lists of chunk JSON bytes (an error as `{"error": ...}`, no `[DONE]`)."""
        return self._relay(False)

    async def _relay(self, sse: bool) -> AsyncIterator[Any]:
        """One generator for both shapes (a relay layered on another costs every hot-path stream a
        generator hop per batch): SSE bytes when `sse`, else lists of chunk JSON bytes."""
        lease = self._lease = await self._service.open_stream(self._call)
        self._renaming(lease)
        shape = self._sse if sse else self._events
        policy = self._call.guard
        # The output guardrails, when any apply: the only per-batch cost of a stream without them is
        # this None test.
        guard = _ReplyGuard(policy, lease.model.id, self._call.key.org_slug) if policy and policy.output else None
        metered = False
        tail: Any = b"" if sse else []  # the last batch: it goes out with the end, after the commit
        try:
            try:
                batch = lease.first
                while True:
                    if batch and batch[-1] == b"[DONE]":  # the engine saw the end: no read waits
                        batch.pop()
                        if guard is not None:
                            batch = await self._guarded(batch, guard, True)
                        break
                    if guard is not None:
                        batch = await self._guarded(batch, guard, False)
                        if guard.blocked_by is not None:
                            break  # the reply ends here, with finish_reason content_filter
                    if batch:
                        yield shape(batch)
                    try:
                        batch = await lease.events.__anext__()
                    except StopAsyncIteration:
                        batch = await self._guarded([], guard, True) if guard is not None else []
                        break
                # The last events, the usage chunk and [DONE] leave in one write (one syscall and
                # one chunk of the HTTP body, not three), once the row is committed.
                if batch:
                    tail = shape(batch)
                reported = self._usage is not None
                metered = True
                try:
                    await self._meter(lease, 200)
                except Exception:
                    if tail:
                        yield tail  # what the client was owed; the failure is reported after it
                        tail = b"" if sse else []
                    raise
                if sse:
                    yield tail + (DONE_FRAME if reported else (
                        b"data: " + self._usage_chunk(lease) + b"\n\n" + DONE_FRAME))
                elif not reported:
                    yield tail + [self._usage_chunk(lease)]
                elif tail:
                    yield tail
            except InferdError as exc:
                if not metered:
                    metered = True
                    await self._meter(lease, exc.status)
                error = orjson.dumps({"error": {"message": exc.message, "type": "engine_error", "code": exc.code}})
                yield tail + b"data: " + error + b"\n\n" if sse else tail + [error]
        finally:
            await lease.events.aclose()  # type: ignore[attr-defined]
            if not metered:  # the client went away: bill what was produced
                await self._meter(lease, CLIENT_CLOSED)
            lease.release()

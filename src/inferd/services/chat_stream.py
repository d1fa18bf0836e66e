"""A chat stream relayed from the engine to its caller: usage noted as it passes (or counted from
the deltas when the engine reports none), the model renamed, reasoning exposed, the output
guardrails applied, and the usage row made durable before the last frame."""

from __future__ import annotations

from typing import Any, AsyncIterator, Protocol

import orjson

from inferd.calls.stage import StreamLease
from inferd.catalogue import Deployment
from inferd.engines.base import ChatEngine
from inferd.errors import InferdError
from inferd.guardrails.policy import OutputStream, Policy
from inferd.services.chat_call import (CLIENT_CLOSED, DONE_FRAME, TEXT_FIELDS, ChatCall, usage_numbers,
                                       with_reasoning)

# Deltas that carry no token: the opening role chunk and the closing finish chunk.
_EMPTY_DELTAS = (b'"content":""', b'"content": ""', b'"delta":{}', b'"delta": {}')


class StreamSource(Protocol):
    """What a relay asks of the chat service: the stream, and a prompt's size when the engine
    reported none."""

    async def open_stream(self, call: ChatCall) -> StreamLease: ...

    async def prompt_tokens(self, call: ChatCall, engine: ChatEngine, deployment: Deployment) -> int: ...


_TOOL = "tool_calls."  # a tool call's arguments are the field `tool_calls.<index>`


class ReplyGuard:
    """A streamed reply's texts through the output guardrails: the answer, the reasoning and each
    tool call's arguments in an `OutputStream` of their own (each holds back only what a match can
    span)."""

    def __init__(self, policy: Policy, model: str, org: str) -> None:
        self._policy = policy
        self._model = model
        self._org = org
        self._streams: dict[str, OutputStream] = {}
        self.blocked_by: str | None = None

    def feed(self, field: str, text: str) -> str:
        """What of a field's new text may be sent now (its filter made when the field first comes)."""
        stream = self._streams.get(field)
        if stream is None:
            stream = self._streams[field] = self._policy.output_stream(self._model, self._org)
        text = stream.feed(text)
        self.blocked_by = self.blocked_by or stream.blocked_by
        return text

    def open_fields(self) -> list[str]:
        return list(self._streams)

    async def flush(self, fields: list[str] | None = None) -> list[tuple[str, str]]:
        """What each field (of `fields`, else every one) still held, its filter closed: at the end
        of the reply, or of a field that is complete (the text once tool calls begin, a tool call's
        arguments once the next one begins). Once blocked, a field gives the text before the match."""
        rests = []
        for field in self.open_fields() if fields is None else fields:
            stream = self._streams.pop(field)
            rest = await stream.flush()
            self.blocked_by = self.blocked_by or stream.blocked_by
            if rest:
                rests.append((field, rest))
        return rests


def _put_rests(delta: dict[str, Any], rests: list[tuple[str, str]]) -> None:
    """Add what the guard held back to a chunk's delta: text fields after their text, a tool call's
    arguments after its own (or in an entry of its own)."""
    for field, rest in rests:
        if not field.startswith(_TOOL):
            delta[field] = (delta.get(field) or "") + rest
            continue
        index = int(field[len(_TOOL):])
        calls = delta.setdefault("tool_calls", [])
        entry = next((c for c in calls if isinstance(c, dict) and c.get("index", 0) == index), None)
        if entry is None:
            calls.append({"index": index, "function": {"arguments": rest}})
        else:
            function = entry.setdefault("function", {})
            function["arguments"] = (function.get("arguments") or "") + rest


class StreamRelay:
    """Relays one upstream stream, watching for usage and counting deltas as it goes."""

    def __init__(self, service: StreamSource, call: ChatCall) -> None:
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
        self._guard: ReplyGuard | None = None  # the output guardrails, when any apply

    async def _guarded(self, batch: list[bytes], guard: ReplyGuard, end: bool) -> list[bytes]:
        """A batch of events through the output guardrails: each text delta (answer, reasoning or a
        tool call's arguments) as much of it as may be sent now; the held-back rest with the finish
        chunk (or, `end`, in a chunk of its own); once a guardrail blocks, the text before the match
        and a finish chunk with `content_filter`, and nothing after it."""
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
                    delta[name] = guard.feed(name, delta[name])
            if delta.get("tool_calls"):
                await self._guard_tools(delta, guard)
            if choice.get("finish_reason") and guard.blocked_by is None and not self._flushed:
                self._flushed = True
                _put_rests(delta, await guard.flush())
            if guard.blocked_by is not None:
                delta.pop("tool_calls", None)
                choice["finish_reason"] = "content_filter"
                out.append(orjson.dumps(chunk))
                return out
            out.append(orjson.dumps(chunk))
        if end and not self._flushed:
            self._flushed = True
            delta: dict[str, Any] = {}
            _put_rests(delta, await guard.flush())
            if delta or guard.blocked_by is not None:
                out.append(orjson.dumps({**(self._chunk_head or {}), "object": "chat.completion.chunk",
                                         "model": self._call.model.id, "choices": [{
                                             "index": 0, "delta": delta,
                                             "finish_reason": "content_filter" if guard.blocked_by else None}]}))
        return out

    @staticmethod
    async def _guard_tools(delta: dict[str, Any], guard: ReplyGuard) -> None:
        """A delta's tool calls through the output guardrails: each call's arguments held back as
        text is. The text before the first call, and a call's arguments once the next call begins,
        are complete: what the guard held of them goes out first, so a client sees each block whole
        and in order."""
        calls: list[Any] = []
        for call in delta["tool_calls"]:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                calls.append(call)
                continue
            field = f"{_TOOL}{call.get('index', 0)}"
            done = [f for f in guard.open_fields() if f != field and (f.startswith(_TOOL) or f in TEXT_FIELDS)]
            if done:
                rests = await guard.flush(done)
                texts = {f: r for f, r in rests if not f.startswith(_TOOL)}
                for name, rest in texts.items():
                    delta[name] = (delta.get(name) or "") + rest
                calls.extend({"index": int(f[len(_TOOL):]), "function": {"arguments": r}}
                             for f, r in rests if f.startswith(_TOOL))
            if guard.blocked_by is not None:
                break
            if isinstance(function.get("arguments"), str) and function["arguments"]:
                call = {**call, "function": {**function, "arguments": guard.feed(field, function["arguments"])}}
            calls.append(call)
        delta["tool_calls"] = calls

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
                numbers = usage_numbers(orjson.loads(data).get("usage"))
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
                        with_reasoning(choice["delta"])
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
        blocked = self._guard.blocked_by if self._guard is not None else None
        await lease.finish(status, *self._usage, guardrail=blocked)

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
        guard = self._guard = ReplyGuard(policy, lease.model.id, self._call.key.org_slug) \
            if policy and policy.output else None
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

"""The spans of a request, named and attributed by the OpenTelemetry GenAI conventions.

- The **server span** (`begin` .. `end`, from the app): one per `/v1/` request, continuing the
  client's `traceparent` when it sends a valid one. Named `{operation} {model}` (`chat qwen-7b`)
  once the request is known to be a model call, else `{method} {route}`.
- An **attempt span** (`attempt`, from the call stage): one per engine attempt, a child of the
  span active then, so a failover shows one per deployment tried. Its `traceparent` goes
  upstream. A stream's attempt lasts until the stream ends (`StreamLease.finish`).
- A **retrieval span** (`retrieval`, from a generate turn): the turn's search of its sources,
  with the embedding calls it makes as its children.

Prompts and replies go into attributes only with `capture_content`, and never those of a call a
guardrail checks (the text it exists to hide would be in the trace); errors are named by their
type or code, never their message (an upstream's error text may quote the prompt).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, TypeVar
from urllib.parse import urlsplit

import orjson

from inferd.observe.requests import current
from inferd.tracing.context import active, attempting, parse_traceparent
from inferd.tracing.records import CLIENT, INTERNAL, SERVER, SpanRecord, new_id

if TYPE_CHECKING:
    from inferd.catalogue import Deployment, Model
    from inferd.config_tracing import TracingConfig
    from inferd.observe.requests import RequestNote

T = TypeVar("T")
_LOW64 = (1 << 64) - 1

# gen_ai.operation.name of each route that calls a model (the conventions' values where they have
# one: chat, embeddings; the others are inferd's).
ROUTE_OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/messages": "chat",
    "/v1/responses": "chat",
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/v1/chat/count_tokens": "count_tokens",
    "/v1/messages/count_tokens": "count_tokens",
    "/v1/audio/transcriptions": "transcription",
    "/v1/audio/translations": "translation",
    "/v1/audio/speech": "speech",
    "/v1/images/generations": "image_generation",
    "/v1/conversations/{conversation_id}/generate": "chat",
}
# An attempt's operation, by the capability the stage asked of the engine.
CAPABILITY_OPERATIONS = {
    "ChatEngine": "chat", "EmbeddingEngine": "embeddings", "RerankEngine": "rerank", "SpeechEngine": "speech",
    "TranscriptionEngine": "transcription", "ImageEngine": "image_generation",
}
_FINISH = (b'"finish_reason":"', b'"finish_reason": "')


class ServerSpan:
    """The request's span and what the corridor learns of the request for it."""

    __slots__ = ("record", "token", "request_model", "max_tokens", "temperature", "operation", "finish_reasons",
                 "output", "cache_hit", "guarded")

    def __init__(self, record: SpanRecord) -> None:
        self.record = record
        self.token = active.set(record)
        self.request_model: str | None = None  # the model the client named (an alias, maybe)
        self.max_tokens: int | None = None
        self.temperature: float | None = None
        self.operation: str | None = None  # the first attempt's, for routes not in ROUTE_OPERATIONS
        self.finish_reasons: tuple[str, ...] = ()
        self.output: str | None = None  # the reply, with capture_content
        self.cache_hit = False  # a response cache that answers sets it
        self.guarded = False  # a guardrail checks the caller's calls: no content is captured


class Tracing:
    """Starts and ends spans; ended, sampled spans go to `sink` (the export queue)."""

    def __init__(self, config: "TracingConfig", sink: Callable[[SpanRecord], None]) -> None:
        self.capture_content = config.capture_content
        self._sink = sink
        self._keep_below = int(config.sample_ratio * (1 << 64))  # new traces: kept when their low 64 bits are below
        self._attempts: dict[tuple[Any, type, str | None], tuple[str, str, dict[str, Any]]] = {}
        self.guardrails: Any = None  # guardrails/policy.py Guardrails, when configured (wiring sets it)

    def _guarded(self, key: Any) -> bool:
        """Whether a guardrail checks `key`'s calls (a key record), so its text stays out of spans."""
        return self.guardrails is not None and key is not None and \
            self.guardrails.policy(key.org_slug, key.org_guardrails) is not None

    def _finish(self, record: SpanRecord) -> None:
        record.end_ns = time.time_ns()
        if record.sampled:
            self._sink(record)

    # --- the request (app.py, api/hot.py) ------------------------------------------------------

    def begin(self, scope: dict[str, Any], note: "RequestNote") -> None:
        """Open the server span of a `/v1/` request (others are not traced) and make it active."""
        path = scope["path"]
        if not path.startswith("/v1/"):
            return
        traceparent = tracestate = None
        for name, value in scope["headers"]:
            if name == b"traceparent":
                traceparent = value
            elif name == b"tracestate":
                tracestate = value
        parent = parse_traceparent(traceparent.decode("latin-1")) if traceparent else None
        method = scope["method"]
        attributes: dict[str, Any] = {"http.request.method": method, "url.path": path,
                                      "inferd.request_id": note.request_id}
        if parent is not None:
            trace_id, parent_id, flags = parent
            state = _trace_state(tracestate)
            record = SpanRecord(f"{method} {path}", SERVER, trace_id, parent_id, bool(flags & 1), attributes,
                                remote_parent=True, tracestate=state)
        else:
            trace_id = new_id(128) or 1
            record = SpanRecord(f"{method} {path}", SERVER, trace_id, None, (trace_id & _LOW64) < self._keep_below,
                                attributes)
        note.trace = ServerSpan(record)

    def request_body(self, body: dict[str, Any], key: Any = None) -> None:
        """What a JSON route's body says of the call (`key`: the caller's key record): the model
        named, the sampling limits, and (with capture_content) the messages."""
        note = current.get()
        server: ServerSpan | None = note.trace if note is not None else None
        if server is None:
            return
        model = body.get("model")
        if isinstance(model, str):
            server.request_model = model[:256]  # a model id's longest; the body is the client's to fill
        for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
            value = body.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                server.max_tokens = value
                break
        temperature = body.get("temperature")
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
            server.temperature = float(temperature)
        if self.capture_content and not server.guarded:
            if self._guarded(key):
                server.guarded = True
                return
            attributes = server.record.attributes
            messages = body.get("messages", body.get("input"))
            if messages is not None:
                attributes["gen_ai.input.messages"] = _json(messages)
            system = body.get("system", body.get("instructions"))
            if system is not None:
                attributes["gen_ai.system_instructions"] = _json(system)

    def end(self, note: "RequestNote", route: str) -> None:
        """Close the request's span with what the request did (the note's facts)."""
        server: ServerSpan = note.trace
        active.reset(server.token)
        record = server.record
        attributes = record.attributes
        status = note.status
        if route:
            attributes["http.route"] = route
        attributes["http.response.status_code"] = status
        operation = ROUTE_OPERATIONS.get(route) or server.operation
        model = server.request_model or note.model
        if operation is not None:
            attributes["gen_ai.operation.name"] = operation
            if model:
                attributes["gen_ai.request.model"] = model
            if note.model:
                attributes["gen_ai.response.model"] = note.model
            attributes["gen_ai.usage.input_tokens"] = note.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = note.completion_tokens
            attributes["inferd.cache_hit"] = server.cache_hit or _cache_hit(note)
        _limits(attributes, server.max_tokens, server.temperature)
        if server.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = server.finish_reasons
        if server.output is not None:
            attributes["gen_ai.output.messages"] = server.output
        if note.deployment:
            attributes["inferd.deployment"] = note.deployment
        if note.key_id:
            attributes["inferd.key_id"] = note.key_id
        if note.org:
            attributes["inferd.org"] = note.org
        if status >= 400 and status != 499:
            attributes["error.type"] = str(status)
            if status >= 500:  # a client's error leaves a server span's status unset (HTTP conventions)
                record.error = str(status)
        record.name = f"{operation} {model}" if operation and model else f"{record.attributes['http.request.method']} " \
                                                                          f"{route or attributes['url.path']}"
        self._finish(record)

    # --- engine attempts (calls/stage.py) ------------------------------------------------------

    def attempt(self, capability: type, deployment: "Deployment", model: "Model",
                operation: str | None = None, key: Any = None) -> "AttemptSpan | None":
        """The span of one attempt on `deployment`, made the one whose trace headers go upstream;
        None outside a traced request (the batch worker, the health probes)."""
        parent = active.get()
        if parent is None:
            return None
        note = current.get()
        server: ServerSpan | None = note.trace if note is not None else None
        template = self._attempts.get((deployment, capability, operation))
        if template is None:
            template = self._attempt_template(capability, deployment, model, operation)
        operation, name, fixed = template
        attributes = fixed.copy()
        capture = self.capture_content
        if server is not None:
            _limits(attributes, server.max_tokens, server.temperature)
            if server.operation is None:
                server.operation = operation
            if capture and not server.guarded and self._guarded(key):
                server.guarded = True
                server.record.attributes.pop("gen_ai.input.messages", None)
                server.record.attributes.pop("gen_ai.system_instructions", None)
            capture = capture and not server.guarded
        elif capture:
            capture = not self._guarded(key)
        record = SpanRecord(name, CLIENT, parent.trace_id, parent.span_id, parent.sampled, attributes,
                            tracestate=parent.tracestate)
        return AttemptSpan(self, record, server, capture)

    def _attempt_template(self, capability: type, deployment: "Deployment", model: "Model",
                          operation: str | None) -> tuple[str, str, dict[str, Any]]:
        """What every attempt of `capability` on `deployment` shares (its operation, span name and
        fixed attributes), built once: deployments live as long as the process."""
        named = operation or CAPABILITY_OPERATIONS.get(capability.__name__, "call")
        config = deployment.config
        fixed: dict[str, Any] = {"gen_ai.operation.name": named, "gen_ai.request.model": deployment.upstream,
                                 "gen_ai.provider.name": config.engine, "inferd.deployment": deployment.name,
                                 "inferd.model": model.id}
        if config.base_url:
            parts = urlsplit(config.base_url)
            fixed["server.address"] = parts.hostname or ""
            fixed["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
        template = (named, f"{named} {deployment.upstream}", fixed)
        self._attempts[(deployment, capability, operation)] = template
        return template

    # --- a generate turn's retrieval (services/generate.py) ------------------------------------

    async def retrieval(self, run: Awaitable[list[T]], conversation_id: int) -> list[T]:
        """Await `run` (the turn's retrieval) inside a span of its own, the parent of the calls it makes."""
        parent = active.get()
        if parent is None:
            return await run
        record = SpanRecord(f"retrieval {conversation_id}", INTERNAL, parent.trace_id, parent.span_id, parent.sampled,
                            {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": str(conversation_id)},
                            tracestate=parent.tracestate)
        token = active.set(record)
        try:
            found = await run
            record.attributes["inferd.retrieval.passages"] = len(found)
            return found
        except BaseException as exc:
            record.error = type(exc).__name__
            raise
        finally:
            active.reset(token)
            self._finish(record)

    def failed(self, exc: BaseException) -> None:
        """Mark the active span failed (a step that handles its own error, as retrieval does)."""
        record = active.get()
        if record is not None and record.kind != SERVER:
            record.error = getattr(exc, "code", None) or type(exc).__name__
            record.attributes["error.type"] = record.error


class AttemptSpan:
    """One engine attempt's span; ended by `answered`/`failed`, or, for a stream, by the lease."""

    __slots__ = ("_tracing", "record", "headers", "_token", "_server", "_reasons", "_text")

    def __init__(self, tracing: Tracing, record: SpanRecord, server: ServerSpan | None, capture: bool) -> None:
        self._tracing = tracing
        self.record = record
        headers = {"traceparent": record.traceparent()}
        if record.tracestate:
            headers["tracestate"] = record.tracestate
        self.headers = headers  # what the HTTP engines send upstream
        self._server = server
        self._reasons: list[str] = []
        self._text: list[str] | None = [] if capture else None  # the reply's text, when captured
        self._token = attempting.set(self)

    def detach(self) -> None:
        """The attempt's request has gone: later upstream requests are not this attempt's."""
        if self._token is not None:
            attempting.reset(self._token)
            self._token = None

    def answered(self, value: Any, hold: bool) -> None:
        """The attempt answered: take its usage and reply from `value` (the stage's `Answer`, or a
        token count); a stream (`hold`) stays open until its lease ends it."""
        self.detach()
        if hold:
            return
        attributes = self.record.attributes
        prompt = getattr(value, "prompt_tokens", None)
        if prompt is None:
            prompt = getattr(value, "input_tokens", None)
        if isinstance(prompt, int):
            attributes["gen_ai.usage.input_tokens"] = prompt
        completion = getattr(value, "completion_tokens", None)
        if isinstance(completion, int):
            attributes["gen_ai.usage.output_tokens"] = completion
        reply = getattr(value, "value", None)
        if isinstance(reply, dict):
            self._read_reply(reply)
        self.end()

    def _read_reply(self, reply: dict[str, Any]) -> None:
        if isinstance(reply.get("model"), str):
            self.record.attributes["gen_ai.response.model"] = reply["model"]
        if isinstance(reply.get("id"), str):
            self.record.attributes["gen_ai.response.id"] = reply["id"]
        choices = reply.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if isinstance(choice.get("finish_reason"), str):
                self._reasons.append(choice["finish_reason"])
            message = choice.get("message")
            if self._text is not None and isinstance(message, dict) and isinstance(message.get("content"), str):
                self._text.append(message["content"])

    def failed(self, exc: BaseException, reason: str | None) -> None:
        """The attempt failed: its error type (and why the call moved on, when it did)."""
        self.detach()
        attributes = self.record.attributes
        self.record.error = getattr(exc, "code", None) or type(exc).__name__
        attributes["error.type"] = self.record.error
        if reason is not None:
            attributes["inferd.failover_reason"] = reason
        self.end()

    # --- streams -------------------------------------------------------------------------------

    def watch(self, first: list[bytes], events: AsyncIterator[list[bytes]]) -> AsyncIterator[list[bytes]]:
        """The stream's events, read for the finish reasons (and, with capture_content, the text)
        as they pass."""
        self.saw(first)
        return _Watched(self, events)

    def saw(self, batch: list[bytes]) -> None:
        """One batch of a stream's events (JSON chunks)."""
        text = self._text
        for data in batch:
            if text is None and _FINISH[0] not in data and _FINISH[1] not in data:
                continue
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            for choice in chunk.get("choices") or () if isinstance(chunk, dict) else ():
                if not isinstance(choice, dict):
                    continue
                if isinstance(choice.get("finish_reason"), str):
                    self._reasons.append(choice["finish_reason"])
                delta = choice.get("delta")
                if text is not None and isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    text.append(delta["content"])

    def finished(self, status: int, prompt: int, completion: int) -> None:
        """The stream ended (its usage metered) with `status`."""
        attributes = self.record.attributes
        attributes["gen_ai.usage.input_tokens"] = prompt
        attributes["gen_ai.usage.output_tokens"] = completion
        if status >= 400 and status != 499:
            self.record.error = attributes["error.type"] = str(status)
        self.end()

    def end(self) -> None:
        """Close the span (once)."""
        record = self.record
        if record.end_ns:
            return
        self.detach()
        if self._reasons:
            reasons = tuple(self._reasons)
            record.attributes["gen_ai.response.finish_reasons"] = reasons
            if self._server is not None:
                self._server.finish_reasons = reasons
        if self._text is not None and (self._text or self._reasons):
            output = _json([{"role": "assistant", "content": "".join(self._text)}])
            record.attributes["gen_ai.output.messages"] = output
            if self._server is not None:
                self._server.output = output
        self._tracing._finish(record)


class _Watched:
    """A stream's events passed through `AttemptSpan.saw`; closing it closes the stream (a
    generator would not run its `finally` when closed before its first batch)."""

    __slots__ = ("_span", "_events")

    def __init__(self, span: AttemptSpan, events: AsyncIterator[list[bytes]]) -> None:
        self._span = span
        self._events = events

    def __aiter__(self) -> "_Watched":
        return self

    async def __anext__(self) -> list[bytes]:
        batch = await self._events.__anext__()
        self._span.saw(batch)
        return batch

    async def aclose(self) -> None:
        await self._events.aclose()  # type: ignore[attr-defined]


def _trace_state(header: bytes | None) -> str | None:
    """The client's `tracestate`, passed on upstream as it came when it is well-formed enough to
    repeat (at most 512 printable ASCII characters); otherwise dropped, as W3C Trace Context allows."""
    if not header or len(header) > 512 or not all(0x20 <= byte < 0x7f for byte in header):
        return None
    return header.decode("ascii").strip() or None


def _cache_hit(note: "RequestNote") -> bool:
    """Whether the response cache answered (its `x-inferd-cache: hit` header on the note)."""
    headers = getattr(note, "cache", None)
    return bool(headers) and any(name == b"x-inferd-cache" and value == b"hit" for name, value in headers)


def _limits(attributes: dict[str, Any], max_tokens: int | None, temperature: float | None) -> None:
    if max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    if temperature is not None:
        attributes["gen_ai.request.temperature"] = temperature


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()

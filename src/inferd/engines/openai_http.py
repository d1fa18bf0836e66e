"""The `openai` engine: any HTTP upstream speaking the chat-completion wire shape
(vLLM, SGLang, llama.cpp server, Ollama, TGI), over kept-alive connections (engines/upstream_http.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, NoReturn
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson

from inferd.config_models import ModelConfig
from inferd.engines.base import TokenCount, estimate_tokens
from inferd.engines.hf_tokenizer import ChatTemplateTokenizer
from inferd.engines.transcripts import PLAIN_FORMATS, spoken_text
from inferd.engines.upstream_http import (UpstreamBroke, UpstreamHTTP, UpstreamReply, UpstreamUnreachable,
                                         retry_after_seconds)
from inferd.observe.requests import current
from inferd.tracing.context import attempting
from inferd.errors import (ConfigError, EngineCredentialsRefused, EngineError, EngineTimeout, EngineUnavailable,
                           InvalidRequest, RelayedError)

if TYPE_CHECKING:
    from inferd.engines.registry import EngineRegistry

BASE_PARAMETERS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "stream",
                   "stream_options", "seed", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs",
                   "top_logprobs", "n", "user")
_JSON = "application/json"


def _split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events' data fields from `buffer`, and the unfinished rest."""
    if b"\r" in buffer:
        buffer = buffer.replace(b"\r\n", b"\n")
    end = buffer.rfind(b"\n\n")
    if end < 0:
        return [], buffer
    # What OpenAI-shaped engines send: `data: <json>` events and nothing else. JSON holds no raw
    # newline, so when every newline of the complete part is one of the `\n\ndata: ` joints the
    # events are one C-level split (an event-by-event loop was a tenth of a busy stream's CPU).
    if buffer.startswith(b"data: ") and buffer.count(b"\n", 0, end) == 2 * buffer.count(b"\n\ndata: ", 0, end):
        return buffer[6:end].split(b"\n\ndata: "), buffer[end + 2:]
    events: list[bytes] = []
    start = 0
    while True:
        end = buffer.find(b"\n\n", start)
        if end < 0:
            return events, buffer[start:]
        event = buffer[start:end]
        start = end + 2
        if event.startswith(b"data: ") and b"\n" not in event:
            events.append(event[6:])
            continue
        data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            events.append(b"\n".join(data))


def _without_credentials(url: str) -> str:
    """`url` without a `user:password@` part, which a base_url may carry: the log must not hold it."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class OpenAIHTTPEngine:
    """Chat, streaming and token counting against an OpenAI-compatible server.

    Errors name the model (and its deployment when it has a name of its own), never the
    upstream's address: that, and the exception's own text, go to the log only.
    """

    base_parameters = BASE_PARAMETERS

    def __init__(self, model: ModelConfig) -> None:
        if not model.base_url:
            raise ConfigError(f"model {model.id!r}: engine 'openai' needs base_url")
        base = self._base = model.base_url.rstrip("/")
        self._chat_url = base + "/chat/completions"
        # vLLM serves /tokenize beside /v1, not under it.
        self._tokenize_url = (base[:-3] if base.endswith("/v1") else base) + "/tokenize"
        self._headers = {"Content-Type": _JSON}
        self._api_key = model.api_key
        if model.api_key:
            self._headers["Authorization"] = f"Bearer {model.api_key}"
        self._http = UpstreamHTTP(base, self._headers, connect_timeout=min(model.timeout_s, 30.0),
                                  read_timeout=model.timeout_s)
        self._timeout_s = model.timeout_s
        self._tokenizer = model.tokenizer
        self._local: ChatTemplateTokenizer | None = None
        if model.tokenizer.startswith("hf:"):
            self._local = ChatTemplateTokenizer(Path(model.tokenizer[3:]))
        self._context_length = model.context_length
        # Who errors name to the client: the model, and its deployment when that has a name of its own.
        named = model.deployment_name
        deployment = f" (deployment '{named}')" if named != model.id else ""
        self._engine = f"The engine for model '{model.id}'{deployment}"

    def _failed(self, kind: type[EngineError], message: str, url: str, detail: object = "",
                code: str | None = None) -> EngineError:
        """`kind` with a message naming the model; the URL and `detail` are logged, not sent."""
        if isinstance(detail, BaseException):
            detail = f"{type(detail).__name__}: {detail}"
        logged = f"{_without_credentials(url)} {detail}".rstrip()
        if self._api_key:  # a refusing upstream may quote the key it was sent
            logged = logged.replace(self._api_key, "***")
        return kind.concealing(f"{self._engine} {message}", logged, code=code)

    def _timed_out(self, url: str, streaming: bool = False) -> EngineError:
        seconds = f"{self._timeout_s:g} s"
        waited = f"sent nothing for {seconds}" if streaming else f"did not respond within {seconds}"
        return self._failed(EngineTimeout, waited, url)

    async def _send(self, method: str, url: str, body: bytes | None = None,
                    form: aiohttp.FormData | None = None) -> UpstreamReply:
        """One request, up to the answer's head, carrying the request's `x-request-id` and, when the
        request is traced, the attempt's `traceparent`."""
        note = current.get()
        request_id = trace = None
        if note is not None:
            request_id = note.request_id
            if note.trace is not None:
                attempt = attempting.get()
                trace = attempt.headers if attempt is not None else None
        try:
            if form is not None:
                return await self._http.post_form(url, form, request_id, trace)
            return await self._http.request(method, url, body, request_id, trace)
        except asyncio.TimeoutError:
            raise self._timed_out(url) from None
        except UpstreamUnreachable as exc:  # its text holds host:port
            raise self._failed(EngineUnavailable, "is unreachable", url, exc) from None
        except UpstreamBroke as exc:
            raise self._failed(EngineError, "failed", url, exc) from None

    async def _post(self, url: str, payload: dict[str, Any]) -> UpstreamReply:
        return await self._send("POST", url, orjson.dumps(payload))

    async def _read(self, response: UpstreamReply, url: str) -> bytes:
        """The body of a 2xx answer (the connection released); any other status raises."""
        ok = response.status < 300
        try:
            raw = await response.read()
        except asyncio.TimeoutError:
            if ok:
                raise self._timed_out(url) from None
            raw = b""
        except UpstreamBroke as exc:
            if ok:
                raise self._failed(EngineError, "failed", url, exc) from None
            raw = b""
        finally:
            response.release()
        if not ok:
            self._refuse(response, raw, url)
        return raw

    def _refuse(self, response: UpstreamReply, raw: bytes, url: str) -> NoReturn:
        """Raise for a non-2xx answer: 4xx are the model's own rejections and pass through, except
        refused credentials (the gateway's `api_key` is wrong, not the client's)."""
        status = response.status
        answered = f"(upstream answered {status})"
        body = raw[:500].decode("utf-8", "replace")
        if status in (401, 403, 407):
            raise self._failed(EngineCredentialsRefused, f"refused the gateway's credentials {answered}", url, body)
        if 400 <= status < 500:
            # A 429 always says when to come back: the engine's own
            # Retry-After in whole seconds, else one second.
            headers = {"Retry-After": str(retry_after_seconds(response.headers.get("retry-after")))} \
                if status == 429 else None
            raise RelayedError(status, raw, response.headers.get("content-type", _JSON), headers)
        # 5xx (and stray 3xx) bodies may carry tracebacks, paths and hosts: logged, not relayed.
        raise self._failed(EngineError, f"failed {answered}", url, body)

    def _parse(self, raw: bytes, url: str, what: str) -> Any:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise self._failed(EngineError, f"returned {what} that is not JSON", url, raw[:200]) from None

    async def _post_json(self, url: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST a JSON body and return the JSON object answered."""
        body = self._parse(await self._read(await self._post(url, payload), url), url, "a body")
        if not isinstance(body, dict):
            raise self._failed(EngineError, "returned JSON that is not an object", url)
        return body

    async def _post_for(self, path: str, payload: dict[str, Any], listed: str, what: str) -> dict[str, Any]:
        """POST to `{base_url}{path}`; the answer must hold a list under `listed`."""
        body = await self._post_json(self._base + path, payload)
        if not isinstance(body.get(listed), list):
            raise self._failed(EngineError, f"returned no {what}", self._base + path)
        return body

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One blocking chat completion."""
        return await self._post_for("/chat/completions", payload, "choices", "choices")

    async def embed(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`POST {base_url}/embeddings`: the OpenAI embeddings response."""
        return await self._post_for("/embeddings", payload, "data", "embeddings")

    async def rerank(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`POST {base_url}/rerank` with {model, query, documents, top_n}: `{results: [{index, relevance_score}]}`."""
        return await self._post_for("/rerank", payload, "results", "rerank results")

    async def images(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`POST {base_url}/images/generations`: `{created, data: [{b64_json}]}`."""
        return await self._post_for("/images/generations", payload, "data", "images")

    async def speech(self, payload: dict[str, Any]) -> tuple[bytes, str]:
        """`POST {base_url}/audio/speech`: the audio bytes and their Content-Type."""
        url = self._base + "/audio/speech"
        response = await self._post(url, payload)
        audio = await self._read(response, url)
        return audio, response.headers.get("content-type", "audio/wav")

    async def transcribe(self, path: str, filename: str, fields: dict[str, str]) -> dict[str, Any]:
        """`POST {base_url}/audio/transcriptions` (multipart). A plain format (text, srt, vtt) is asked
        for as such and its bytes come back unchanged under `body`; json formats as verbose_json."""
        url = self._base + "/audio/transcriptions"
        response_format = fields.get("response_format") or "json"
        plain = response_format in PLAIN_FORMATS
        # Names go into the parts' headers as UTF-8, as browsers send them (aiohttp's quoting
        # percent-encodes a file name and cannot send a field name outside ASCII at all); the API
        # took out their control characters (api/uploads.py), and aiohttp refuses any left (400).
        form = aiohttp.FormData(quote_fields=False)
        try:
            for name, value in fields.items():
                if name not in ("response_format", "file"):  # one `file` part: the audio
                    form.add_field(name, value)
            form.add_field("response_format", response_format if plain else "verbose_json")
            with open(path, "rb") as audio:
                form.add_field("file", audio, filename=filename)
                response = await self._send("POST", url, form=form)
        except ValueError as exc:
            raise InvalidRequest(f"file: a name in the form cannot be sent on: {exc}", param="file") from None
        raw = await self._read(response, url)
        if plain:
            return {"text": spoken_text(raw, response_format), "body": raw}
        body = self._parse(raw, url, "a transcription")
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            raise self._failed(EngineError, "returned no transcript", url)
        return body

    async def voices(self) -> Any:
        """`GET {base_url}/audio/voices`, as the engine lists them."""
        url = self._base + "/audio/voices"
        response = await self._send("GET", url)
        return self._parse(await self._read(response, url), url, "a voice list")

    async def chat_stream(self, payload: dict[str, Any]) -> AsyncIterator[list[bytes]]:
        """Relay the upstream's SSE events, buffered to the blank line, until `[DONE]`."""
        url = self._chat_url
        response = await self._post(url, payload)
        if response.status >= 300:
            await self._read(response, url)  # raises
        finished = False
        pieces = response.pieces()
        try:
            buffer = b""
            async for piece in pieces:
                events, buffer = _split_events(buffer + piece)
                if not events:
                    continue
                if b"[DONE]" in events:
                    finished = True
                    yield events[:events.index(b"[DONE]") + 1]  # the end mark: the relay reads no more
                    return
                yield events
            raise self._failed(EngineError, "closed the stream before it finished", url, code="upstream_closed")
        except asyncio.TimeoutError:
            raise self._timed_out(url, streaming=True) from None
        except UpstreamBroke as exc:
            raise self._failed(EngineError, "broke the stream", url, exc, code="upstream_closed") from None
        finally:
            # Closed here, not left to the garbage collector: a dropped async generator is closed
            # by a task the loop's finalizer hook schedules (a self-pipe write, a loop turn and a
            # task for every stream).
            await pieces.aclose()
            if finished:
                response.release()
            else:
                response.close()  # drop the connection: the upstream sees the abort and stops generating

    async def count_tokens(self, payload: dict[str, Any]) -> TokenCount:
        """Count through the upstream's `POST /tokenize`, a local tokenizer, or an estimate."""
        if self._local is not None:
            return TokenCount(await self._local.count_async(payload), self._context_length, exact=True)
        if self._tokenizer != "upstream":
            return TokenCount(estimate_tokens(payload), self._context_length, exact=False)
        request: dict[str, Any] = {"model": payload["model"], "messages": payload["messages"],
                                   "add_generation_prompt": True}
        if payload.get("tools"):
            request["tools"] = payload["tools"]
        if payload.get("reasoning_effort"):
            request["chat_template_kwargs"] = {"reasoning_effort": payload["reasoning_effort"]}
        url = self._tokenize_url
        raw = await self._read(await self._post(url, request), url)
        try:
            body = orjson.loads(raw)
            count = int(body["count"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise self._failed(EngineError, "gave an unreadable /tokenize answer", url, raw[:200]) from None
        window = self._context_length or body.get("max_model_len")
        return TokenCount(count, window, exact=True)

    async def close(self) -> None:
        """Close the kept-alive connections."""
        await self._http.close()


def register(registry: "EngineRegistry") -> None:
    """Add the `openai` engine to a registry."""
    from inferd.engines.registry import EngineSpec

    registry.register(EngineSpec("openai", OpenAIHTTPEngine, option_keys=(), base_parameters=BASE_PARAMETERS))

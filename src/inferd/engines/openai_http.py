"""The `openai` engine: any HTTP upstream speaking the chat-completion wire shape
(vLLM, SGLang, llama.cpp server, Ollama, TGI), over one pooled keep-alive session."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator

import aiohttp
import orjson

from inferd.config import ModelConfig
from inferd.engines.base import TokenCount, estimate_tokens
from inferd.engines.hf_tokenizer import ChatTemplateTokenizer
from inferd.errors import ConfigError, EngineError, EngineTimeout, EngineUnavailable, RelayedError

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


class OpenAIHTTPEngine:
    """Chat, streaming and token counting against an OpenAI-compatible server."""

    base_parameters = BASE_PARAMETERS

    def __init__(self, model: ModelConfig) -> None:
        if not model.base_url:
            raise ConfigError(f"model {model.id!r}: engine 'openai' needs base_url")
        base = self._base = model.base_url.rstrip("/")
        self._chat_url = base + "/chat/completions"
        # vLLM serves /tokenize beside /v1, not under it.
        self._tokenize_url = (base[:-3] if base.endswith("/v1") else base) + "/tokenize"
        self._headers = {"Content-Type": _JSON}
        if model.api_key:
            self._headers["Authorization"] = f"Bearer {model.api_key}"
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(model.timeout_s, 30.0),
                                              sock_read=model.timeout_s)
        self._timeout_s = model.timeout_s
        self._tokenizer = model.tokenizer
        self._local: ChatTemplateTokenizer | None = None
        if model.tokenizer.startswith("hf:"):
            self._local = ChatTemplateTokenizer(Path(model.tokenizer[3:]))
        self._context_length = model.context_length
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                                  json_serialize=lambda o: orjson.dumps(o).decode())
        return self._session

    async def _post(self, url: str, payload: dict[str, Any]) -> aiohttp.ClientResponse:
        try:
            return await self._client().post(url, data=orjson.dumps(payload), headers=self._headers)
        except asyncio.TimeoutError:
            raise EngineTimeout(f"The model did not respond within {self._timeout_s:g} s") from None
        except aiohttp.ClientConnectorError as exc:
            raise EngineUnavailable(f"The model's engine is unreachable: {exc}") from None
        except aiohttp.ClientError as exc:
            raise EngineError(f"The model's engine failed: {exc}") from None

    async def _fail(self, response: aiohttp.ClientResponse) -> None:
        """Raise for a non-2xx answer: 4xx are the model's own rejections and pass through."""
        try:
            raw = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            raw = b""
        finally:
            response.release()
        if response.status < 500:
            raise RelayedError(response.status, raw, response.headers.get("Content-Type", _JSON))
        detail = raw.decode("utf-8", "replace")[:500]
        raise EngineError(f"The model's engine answered {response.status}: {detail}")

    async def _post_json(self, url: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST a JSON body and return the JSON object answered."""
        response = await self._post(url, payload)
        if response.status >= 300:
            await self._fail(response)
        try:
            raw = await response.read()
        except asyncio.TimeoutError:
            raise EngineTimeout(f"The model did not respond within {self._timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise EngineError(f"The model's engine failed: {exc}") from None
        finally:
            response.release()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise EngineError("The model's engine returned a body that is not JSON") from None
        if not isinstance(body, dict):
            raise EngineError("The model's engine returned JSON that is not an object")
        return body

    async def _post_for(self, path: str, payload: dict[str, Any], listed: str, what: str) -> dict[str, Any]:
        """POST to `{base_url}{path}`; the answer must hold a list under `listed`."""
        body = await self._post_json(self._base + path, payload)
        if not isinstance(body.get(listed), list):
            raise EngineError(f"The model's engine returned no {what}")
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
        response = await self._post(self._base + "/audio/speech", payload)
        if response.status >= 300:
            await self._fail(response)
        try:
            audio = await response.read()
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            raise EngineError(f"The model's engine failed: {exc}") from None
        finally:
            response.release()
        return audio, response.headers.get("Content-Type", "audio/wav")

    async def transcribe(self, path: str, filename: str, fields: dict[str, str]) -> dict[str, Any]:
        """`POST {base_url}/audio/transcriptions` (multipart), asked for verbose_json."""
        form = aiohttp.FormData()
        for name, value in fields.items():
            if name != "response_format":
                form.add_field(name, value)
        form.add_field("response_format", "verbose_json")
        headers = {k: v for k, v in self._headers.items() if k != "Content-Type"}
        with open(path, "rb") as audio:
            form.add_field("file", audio, filename=filename)
            try:
                response = await self._client().post(self._base + "/audio/transcriptions", data=form, headers=headers)
            except asyncio.TimeoutError:
                raise EngineTimeout(f"The model did not respond within {self._timeout_s:g} s") from None
            except aiohttp.ClientConnectorError as exc:
                raise EngineUnavailable(f"The model's engine is unreachable: {exc}") from None
        if response.status >= 300:
            await self._fail(response)
        try:
            body = orjson.loads(await response.read())
        except orjson.JSONDecodeError:
            raise EngineError("The model's engine returned a transcription that is not JSON") from None
        finally:
            response.release()
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            raise EngineError("The model's engine returned no transcript")
        return body

    async def voices(self) -> Any:
        """`GET {base_url}/audio/voices`, as the engine lists them."""
        try:
            response = await self._client().get(self._base + "/audio/voices", headers=self._headers)
        except asyncio.TimeoutError:
            raise EngineTimeout(f"The model did not respond within {self._timeout_s:g} s") from None
        except aiohttp.ClientConnectorError as exc:
            raise EngineUnavailable(f"The model's engine is unreachable: {exc}") from None
        if response.status >= 300:
            await self._fail(response)
        try:
            return orjson.loads(await response.read())
        except orjson.JSONDecodeError:
            raise EngineError("The model's engine returned a voice list that is not JSON") from None
        finally:
            response.release()

    async def chat_stream(self, payload: dict[str, Any]) -> AsyncIterator[list[bytes]]:
        """Relay the upstream's SSE events, buffered to the blank line, until `[DONE]`."""
        response = await self._post(self._chat_url, payload)
        if response.status >= 300:
            await self._fail(response)
        finished = False
        try:
            buffer = b""
            async for piece in response.content.iter_any():
                events, buffer = _split_events(buffer + piece)
                if not events:
                    continue
                if b"[DONE]" in events:
                    finished = True
                    done = events.index(b"[DONE]")
                    if done:
                        yield events[:done]
                    return
                yield events
            raise EngineError("The model's engine closed the stream before it finished", code="upstream_closed")
        except asyncio.TimeoutError:
            raise EngineTimeout(f"The model sent nothing for {self._timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise EngineError(f"The model's stream broke: {exc}", code="upstream_closed") from None
        finally:
            if finished:
                response.release()
            else:
                response.close()  # drop the connection: the upstream sees the abort and stops generating

    async def count_tokens(self, payload: dict[str, Any]) -> TokenCount:
        """Count through the upstream's `POST /tokenize`, a local tokenizer, or an estimate."""
        if self._local is not None:
            return TokenCount(self._local.count(payload), self._context_length, exact=True)
        if self._tokenizer != "upstream":
            return TokenCount(estimate_tokens(payload), self._context_length, exact=False)
        request: dict[str, Any] = {"model": payload["model"], "messages": payload["messages"],
                                   "add_generation_prompt": True}
        if payload.get("tools"):
            request["tools"] = payload["tools"]
        if payload.get("reasoning_effort"):
            request["chat_template_kwargs"] = {"reasoning_effort": payload["reasoning_effort"]}
        response = await self._post(self._tokenize_url, request)
        if response.status >= 300:
            await self._fail(response)
        try:
            body = orjson.loads(await response.read())
            count = int(body["count"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise EngineError("The model's engine gave an unreadable /tokenize answer") from None
        finally:
            response.release()
        window = self._context_length or body.get("max_model_len")
        return TokenCount(count, window, exact=True)

    async def close(self) -> None:
        """Close the pooled session."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def register(registry: "EngineRegistry") -> None:
    """Add the `openai` engine to a registry."""
    from inferd.engines.registry import EngineSpec

    registry.register(EngineSpec("openai", OpenAIHTTPEngine, option_keys=(), base_parameters=BASE_PARAMETERS))

"""The `llamacpp` engine: a GGUF model in-process through llama-cpp-python.

The prompt is the GGUF's own chat template (`tokenizer.chat_template`) rendered and tokenized
here, so `count_tokens` is exactly the prompt that is billed. Generation runs on worker threads,
one per model instance (`slots`); requests wait their turn in arrival order, and a stream whose
client leaves stops at the next token.

Preparing a prompt (template, tokenizer, response-format grammar) runs on threads of its own, never
on the event loop: a 32 MiB prompt takes seconds to tokenize, and other clients must not wait on it.
Those threads share the first model instance, which is safe: llama.cpp's tokenizer only reads the
vocabulary, never the context that a generation on another thread is using.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator

import orjson

from inferd.config import ModelConfig
from inferd.engines.base import TokenCount
from inferd.engines.chat_template import ChatTemplate, text_only
from inferd.engines.llamacpp_output import ToolCallParser, grammar_for, split_tool_calls
from inferd.engines.weights import QWEN_CODER_05B
from inferd.errors import ConfigError, InvalidRequest

if TYPE_CHECKING:
    from llama_cpp import Llama

    from inferd.engines.registry import EngineRegistry

BASE_PARAMETERS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "stream",
                   "stream_options", "seed", "presence_penalty", "frequency_penalty")
OPTION_KEYS = ("model_path", "n_ctx", "n_threads", "slots", "builtin_weights", "model_dir")
BUILTIN_WEIGHTS = {"qwen2.5-coder-0.5b-instruct": QWEN_CODER_05B}
DEFAULT_TEMPERATURE = 0.7
# Prompt threads: enough that a small request never waits for one huge prompt, few enough that a
# burst of huge ones queues instead of taking every core from generation.
PROMPT_THREADS = 4
_END = object()


def _option(model: ModelConfig, name: str, kind: type, default: Any) -> Any:
    value = model.options.get(name, default)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise ConfigError(f"model {model.id!r}: option {name!r} must be {kind.__name__}")
    return value


def _model_path(model: ModelConfig) -> Path:
    weights = model.options.get("builtin_weights")
    if weights:
        model_dir = Path(str(model.options.get("model_dir") or "~/.cache/inferd/models")).expanduser()
        return BUILTIN_WEIGHTS[str(weights)].assemble(model_dir)
    path = model.options.get("model_path")
    if not isinstance(path, str) or not path:
        raise ConfigError(f"model {model.id!r}: engine 'llamacpp' needs model_path (a GGUF file)")
    resolved = Path(path).expanduser()
    if not resolved.is_file():
        raise ConfigError(f"model {model.id!r}: model_path {resolved} does not exist")
    return resolved


def _fresh(llama: "Llama", sampling: dict[str, Any]) -> "Llama":
    """The instance, its cache dropped when a seed asks for a repeatable sample: a prompt whose
    prefix is reused is evaluated in smaller batches, and the logits differ in the last bits."""
    if "seed" in sampling:
        llama.reset()
    return llama


def _tokenize(llama: "Llama", text: bytes, add_bos: bool, limit: int) -> tuple[int, list[int]]:
    """(number of tokens in `text`, the tokens themselves when there are at most `limit`, else []).

    llama.cpp reports the size of a prompt that does not fit the buffer without writing it, so an
    oversized prompt is counted in one pass and never becomes a Python list of millions of ints
    (which Llama.tokenize would build, holding the GIL, after tokenizing twice)."""
    import llama_cpp

    buffer = (llama_cpp.llama_token * max(limit, 1))()
    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    written = llama_cpp.llama_tokenize(vocab, text, len(text), buffer, limit, add_bos, True)
    if written < 0:
        return -written, []
    return written, list(buffer[:written])


def _tool_names(payload: dict[str, Any]) -> frozenset[str]:
    return frozenset(t["function"]["name"] for t in payload.get("tools") or () if isinstance(t, dict)
                     and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str))


class LlamaCppEngine:
    """Chat completions from a local GGUF model."""

    base_parameters = BASE_PARAMETERS

    def __init__(self, model: ModelConfig) -> None:
        from llama_cpp import Llama  # imported here: only deployments that use it pay for it

        path = _model_path(model)
        self._id = model.id
        self._n_ctx = _option(model, "n_ctx", int, model.context_length or 8192)
        threads = _option(model, "n_threads", int, os.cpu_count() or 2)
        slots = _option(model, "slots", int, 1)
        self._llamas: list[Llama] = [Llama(model_path=str(path), n_ctx=self._n_ctx, n_threads=threads,
                                           n_threads_batch=threads, verbose=False) for _ in range(slots)]
        first = self._llamas[0]
        template = first.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"model {model.id!r}: {path} carries no tokenizer.chat_template")
        self._add_bos = first.metadata.get("tokenizer.ggml.add_bos_token") == "true"
        self._template = ChatTemplate(template, bos_token=self._token_text(first.token_bos()),
                                      eos_token=self._token_text(first.token_eos()))
        self._executor = ThreadPoolExecutor(max_workers=slots, thread_name_prefix=f"llamacpp-{model.id}")
        self._prompts = ThreadPoolExecutor(max_workers=PROMPT_THREADS,
                                           thread_name_prefix=f"llamacpp-{model.id}-prompt")
        self._free: asyncio.Queue[Llama] | None = None

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._llamas[0].detokenize([token], special=True).decode("utf-8", "replace")

    def _prompt(self, payload: dict[str, Any], limit: int) -> tuple[int, list[int]]:
        """(prompt tokens, the tokens when they fit `limit`) for a payload; runs on a prompt thread."""
        text = self._template.render({**payload, "messages": text_only(payload.get("messages") or [], self._id)})
        return _tokenize(self._llamas[0], text.encode("utf-8"), self._add_bos, limit)

    def _prepare(self, payload: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        """The prompt's tokens and the sampling settings (grammar compiled); runs on a prompt thread."""
        count, tokens = self._prompt(payload, self._n_ctx)
        return tokens, self._sampling(payload, count)

    async def _prepared(self, payload: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        return await asyncio.get_running_loop().run_in_executor(self._prompts, self._prepare, payload)

    async def _slot(self) -> "Llama":
        if self._free is None:
            self._free = asyncio.Queue()
            for llama in self._llamas:
                self._free.put_nowait(llama)
        return await self._free.get()  # FIFO: requests are served in arrival order

    def _sampling(self, payload: dict[str, Any], prompt_tokens: int) -> dict[str, Any]:
        room = self._n_ctx - prompt_tokens
        if room <= 0:
            raise InvalidRequest(f"messages: the prompt is {prompt_tokens} tokens, which exceeds the "
                                 f"{self._n_ctx}-token context window of model '{self._id}'",
                                 code="context_length_exceeded", param="messages")
        limit = payload.get("max_tokens") or payload.get("max_completion_tokens") or room
        stop = payload.get("stop")
        sampling: dict[str, Any] = {
            "max_tokens": min(int(limit), room),
            "temperature": float(payload["temperature"]) if payload.get("temperature") is not None
            else DEFAULT_TEMPERATURE,
            "top_p": float(payload.get("top_p") if payload.get("top_p") is not None else 1.0),
            "stop": [stop] if isinstance(stop, str) else (stop or []),
            "presence_penalty": float(payload.get("presence_penalty") or 0.0),
            "frequency_penalty": float(payload.get("frequency_penalty") or 0.0),
            "grammar": grammar_for(payload.get("response_format")),
        }
        if payload.get("seed") is not None:
            sampling["seed"] = int(payload["seed"])
        return sampling

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One blocking chat completion."""
        tokens, sampling = await self._prepared(payload)
        llama = await self._slot()
        try:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._executor, lambda: _fresh(llama, sampling).create_completion(
                prompt=tokens, stream=False, **sampling))
        finally:
            self._free.put_nowait(llama)  # type: ignore[union-attr]
        choice = result["choices"][0]
        text = choice["text"]
        finish = choice.get("finish_reason") or "stop"
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if payload.get("tools"):
            content, calls = split_tool_calls(text, _tool_names(payload))
            if calls:
                message = {"role": "assistant", "content": content, "tool_calls": calls}
                finish = "tool_calls"
        completion = int(result["usage"]["completion_tokens"])
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self._id, "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                                "logprobs": None}],
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": completion,
                          "total_tokens": len(tokens) + completion}}

    async def chat_stream(self, payload: dict[str, Any]) -> AsyncIterator[list[bytes]]:
        """Chunks in the OpenAI stream shape; tool calls become tool_calls deltas."""
        tokens, sampling = await self._prepared(payload)
        llama = await self._slot()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def generate() -> None:
            produced = 0
            finish = "stop"
            try:
                pieces: Iterator[dict[str, Any]] = _fresh(llama, sampling).create_completion(
                    prompt=tokens, stream=True, **sampling)
                for piece in pieces:
                    if stop.is_set():
                        pieces.close()  # type: ignore[attr-defined]
                        break
                    choice = piece["choices"][0]
                    if choice.get("text"):
                        produced += 1
                        loop.call_soon_threadsafe(queue.put_nowait, choice["text"])
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                loop.call_soon_threadsafe(queue.put_nowait, (finish, produced))
            except BaseException as exc:  # surface the failure on the loop side
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        work = loop.run_in_executor(self._executor, generate)
        chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        parser = ToolCallParser(enabled=bool(payload.get("tools")), tool_names=_tool_names(payload))

        def frame(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return orjson.dumps({"id": chunk_id, "object": "chat.completion.chunk", "created": created,
                                 "model": self._id, "choices": [{"index": 0, "delta": delta,
                                                                 "finish_reason": finish}]})

        try:
            yield [frame({"role": "assistant", "content": ""})]
            while True:
                item = await queue.get()
                items = [item]
                while not queue.empty():
                    items.append(queue.get_nowait())
                out: list[bytes] = []
                for item in items:
                    if item is _END:
                        continue
                    if isinstance(item, BaseException):
                        raise item
                    if isinstance(item, tuple):
                        finish, produced = item
                        out.extend(frame(delta) for delta in parser.flush())
                        out.append(frame({}, "tool_calls" if parser.calls else finish))
                        out.append(orjson.dumps({
                            "id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": self._id,
                            "choices": [], "usage": {"prompt_tokens": len(tokens), "completion_tokens": produced,
                                                     "total_tokens": len(tokens) + produced}}))
                        yield out
                        return
                    out.extend(frame(delta) for delta in parser.feed(item))
                if out:
                    yield out
        finally:
            stop.set()
            await asyncio.shield(work)  # the slot is free only once its thread has let go
            self._free.put_nowait(llama)  # type: ignore[union-attr]

    async def count_tokens(self, payload: dict[str, Any]) -> TokenCount:
        """Exactly the prompt tokens a completion of this payload bills."""
        loop = asyncio.get_running_loop()
        count, _ = await loop.run_in_executor(self._prompts, self._prompt, payload, 0)
        return TokenCount(count, self._n_ctx, exact=True)

    async def close(self) -> None:
        """Free the models."""
        self._prompts.shutdown(wait=True, cancel_futures=True)
        self._executor.shutdown(wait=True)
        for llama in self._llamas:
            llama.close()
        self._llamas.clear()


def register(registry: "EngineRegistry") -> None:
    """Add the `llamacpp` engine to a registry."""
    from inferd.engines.registry import EngineSpec

    registry.register(EngineSpec("llamacpp", LlamaCppEngine, option_keys=OPTION_KEYS,
                                 base_parameters=BASE_PARAMETERS))

"""The `llamacpp` engine: a GGUF model in-process through llama-cpp-python.

The prompt is the GGUF's own chat template (`tokenizer.chat_template`) rendered and tokenized
here, so `count_tokens` is exactly the prompt that is billed. Generation is continuous batching
(`llamacpp_batch.Batcher`): up to `slots` requests decode together, each as a sequence of one
context, joining and leaving at any step; more wait their turn in arrival order, and a stream whose
client leaves stops at the next step.

Preparing a prompt (template, tokenizer, response-format grammar) runs on threads of its own, never
on the event loop: a 32 MiB prompt takes seconds to tokenize, and other clients must not wait on it.
Those threads use the model's vocabulary, which is safe: llama.cpp's tokenizer only reads it, never
the context that the decode thread is using.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator

import orjson

from inferd.config_models import ModelConfig
from inferd.engines.base import TokenCount
from inferd.engines.chat_template import ChatTemplate, text_only
from inferd.engines.llamacpp_batch import END, Batcher, Job
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
# Requests decoding at once, and the KV cache they share, in context windows: four of the built-in
# model's 8,192-token windows are 384 MiB (12 KiB a token). A request may use a whole window; when
# the cache is full even so, the newest request in it fails with 503 (engines/llamacpp_batch.py).
DEFAULT_SLOTS = 8
KV_WINDOWS = 4


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
        slots = _option(model, "slots", int, DEFAULT_SLOTS)
        if slots < 1:
            raise ConfigError(f"model {model.id!r}: option 'slots' must be at least 1")
        # The instance holds the weights, the metadata and the vocabulary; its own context is a
        # token wide and unused. Generation runs in the batcher's context over the same weights.
        self._llama: Llama = Llama(model_path=str(path), n_ctx=16, n_batch=16, n_threads=1, verbose=False)
        template = self._llama.metadata.get("tokenizer.chat_template")
        if not template:
            self._llama.close()
            raise ConfigError(f"model {model.id!r}: {path} carries no tokenizer.chat_template")
        self._add_bos = self._llama.metadata.get("tokenizer.ggml.add_bos_token") == "true"
        self._template = ChatTemplate(template, bos_token=self._token_text(self._llama.token_bos()),
                                      eos_token=self._token_text(self._llama.token_eos()))
        self._batcher = Batcher(self._llama.model, self._n_ctx, self._n_ctx * min(slots, KV_WINDOWS), slots,
                                threads, model.id)
        self._prompts = ThreadPoolExecutor(max_workers=PROMPT_THREADS,
                                           thread_name_prefix=f"llamacpp-{model.id}-prompt")

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._llama.detokenize([token], special=True).decode("utf-8", "replace")

    def _prompt(self, payload: dict[str, Any], limit: int) -> tuple[int, list[int]]:
        """(prompt tokens, the tokens when they fit `limit`) for a payload; runs on a prompt thread."""
        text = self._template.render({**payload, "messages": text_only(payload.get("messages") or [], self._id)})
        return _tokenize(self._llama, text.encode("utf-8"), self._add_bos, limit)

    def _prepare(self, payload: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        """The prompt's tokens and the sampling settings (grammar compiled); runs on a prompt thread."""
        count, tokens = self._prompt(payload, self._n_ctx)
        sampling = self._sampling(payload, count)
        if not tokens:  # nothing to read, so no logits to sample from
            raise InvalidRequest("messages: the prompt renders to no tokens", param="messages")
        return tokens, sampling

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

    async def _generate(self, payload: dict[str, Any]) -> tuple[list[int], Job]:
        """The prompt's tokens and its job, submitted: results arrive on `job.queue`."""
        loop = asyncio.get_running_loop()
        tokens, sampling = await loop.run_in_executor(self._prompts, self._prepare, payload)
        job = Job(tokens, sampling, loop, asyncio.Queue())
        self._batcher.submit(job)
        return tokens, job

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One blocking chat completion."""
        tokens, job = await self._generate(payload)
        pieces: list[str] = []
        try:
            while (item := await job.queue.get()) is not END:
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, tuple):
                    finish, completion = item
                else:
                    pieces.append(item)
        finally:
            self._batcher.cancel(job)  # a no-op once it has ended; frees the sequence if the caller left
        text = "".join(pieces)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if payload.get("tools"):
            content, calls = split_tool_calls(text, _tool_names(payload))
            if calls:
                message = {"role": "assistant", "content": content, "tool_calls": calls}
                finish = "tool_calls"
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self._id, "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                                "logprobs": None}],
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": completion,
                          "total_tokens": len(tokens) + completion}}

    async def chat_stream(self, payload: dict[str, Any]) -> AsyncIterator[list[bytes]]:
        """Chunks in the OpenAI stream shape; tool calls become tool_calls deltas."""
        tokens, job = await self._generate(payload)
        chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        parser = ToolCallParser(enabled=bool(payload.get("tools")), tool_names=_tool_names(payload))

        def frame(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return orjson.dumps({"id": chunk_id, "object": "chat.completion.chunk", "created": created,
                                 "model": self._id, "choices": [{"index": 0, "delta": delta,
                                                                 "finish_reason": finish}]})

        queue = job.queue
        try:
            yield [frame({"role": "assistant", "content": ""})]
            while True:
                items = [await queue.get()]
                while not queue.empty():
                    items.append(queue.get_nowait())
                out: list[bytes] = []
                for item in items:
                    if item is END:
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
            self._batcher.cancel(job)  # the client left: its sequence is free at the next step

    async def count_tokens(self, payload: dict[str, Any]) -> TokenCount:
        """Exactly the prompt tokens a completion of this payload bills."""
        loop = asyncio.get_running_loop()
        count, _ = await loop.run_in_executor(self._prompts, self._prompt, payload, 0)
        return TokenCount(count, self._n_ctx, exact=True)

    async def close(self) -> None:
        """Free the model."""
        self._prompts.shutdown(wait=True, cancel_futures=True)
        await asyncio.get_running_loop().run_in_executor(None, self._batcher.close)
        self._llama.close()


def register(registry: "EngineRegistry") -> None:
    """Add the `llamacpp` engine to a registry."""
    from inferd.engines.registry import EngineSpec

    registry.register(EngineSpec("llamacpp", LlamaCppEngine, option_keys=OPTION_KEYS,
                                 base_parameters=BASE_PARAMETERS))

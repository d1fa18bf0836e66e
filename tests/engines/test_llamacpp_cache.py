"""The built-in model's KV cache (engines/llamacpp_batch.py), with the engine in-process and the
real model: a sequence keeps its cache after its request, so the next turn of a conversation
reads only what is new; and a cache too small for every request at once makes the newest wait
its turn, never fail."""

from __future__ import annotations

import asyncio

from typing import Any

from inferd.config_models import ModelConfig
from inferd.engines.llamacpp import LlamaCppEngine


def _engine(context_length: int, slots: int) -> LlamaCppEngine:
    return LlamaCppEngine(ModelConfig(id="q", engine="llamacpp", context_length=context_length, options={
        "builtin_weights": "qwen2.5-coder-0.5b-instruct", "slots": slots}))


def test_the_next_turn_reads_only_its_new_tokens() -> None:
    async def run() -> tuple[int, int, int]:
        engine = _engine(2048, 2)
        try:
            turn = [{"role": "system", "content": "You are a terse assistant. " * 20},
                    {"role": "user", "content": "Name a prime number."}]
            first = await engine.chat({"model": "q", "temperature": 0, "max_tokens": 8, "messages": turn})
            read_first = engine._batcher.prompt_tokens_read
            turn += [first["choices"][0]["message"], {"role": "user", "content": "And another one?"}]
            second = await engine.chat({"model": "q", "temperature": 0, "max_tokens": 8, "messages": turn})
            return read_first, engine._batcher.prompt_tokens_read - read_first, second["usage"]["prompt_tokens"]
        finally:
            await engine.close()

    read_first, read_second, prompt_second = asyncio.run(run())
    assert read_first > 100  # the first turn reads its whole prompt
    # The second prompt holds the first, the reply and a new question: only what is new is read
    # (less the reply's tokens that were already in the cache), not the whole prompt again.
    assert read_second <= prompt_second - read_first + 1, (read_first, read_second, prompt_second)
    assert read_second * 4 < prompt_second


def test_a_full_cache_makes_the_newest_request_wait_not_fail() -> None:
    # Eight 200-token prompts with 40 tokens each to generate need about 1,900 cells; a 256-token
    # window gives the cache four windows, 1,024 cells.
    async def run() -> tuple[list[dict[str, Any]], int]:
        engine = _engine(256, 8)
        try:
            replies = await asyncio.gather(*(engine.chat({
                "model": "q", "temperature": 0, "max_tokens": 40, "messages": [{"role": "user", "content": (
                    f"Note {n}. " + "The quick brown fox jumps over the lazy dog. " * 15 + "Count from 1 to 50.")}]})
                for n in range(8)))
            return replies, engine._batcher.gave_way
        finally:
            await engine.close()

    replies, gave_way = asyncio.run(run())
    assert gave_way > 0  # the cache did overflow
    assert all(r["usage"]["completion_tokens"] == 40 and r["choices"][0]["finish_reason"] == "length" for r in replies)
    # Read again after giving way, a reply goes on where it was: every reply counts the same way.
    texts = {r["choices"][0]["message"]["content"] for r in replies}
    assert len(texts) == 1 and texts.pop().startswith("1, 2, 3, 4, 5, 6, 7, 8, 9, 10")

"""The built-in model's batcher keeps each sequence's cache after its request: the next turn of a
conversation reads only what is new. The engine in-process with the real model."""

from __future__ import annotations

import asyncio

from inferd.config import ModelConfig
from inferd.engines.llamacpp import LlamaCppEngine


def test_the_next_turn_reads_only_its_new_tokens() -> None:
    async def run() -> tuple[int, int, int]:
        engine = LlamaCppEngine(ModelConfig(id="q", engine="llamacpp", context_length=2048, options={
            "builtin_weights": "qwen2.5-coder-0.5b-instruct", "slots": 2}))
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

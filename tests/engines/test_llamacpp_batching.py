"""The built-in chat model decodes several requests together (continuous batching), through the
running server: requests in flight at once all stream at once, a newcomer starts within a step or
two of the others instead of after them, and no request sees another's tokens."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from tests.harness import Server, auth

MODEL = "qwen2.5-coder-0.5b-instruct"


async def _stream(client: httpx.AsyncClient, url: str, content: str, max_tokens: int,
                  started: asyncio.Event | None = None, seen: list[str] | None = None) -> dict[str, Any]:
    """One greedy streamed request: when it was sent, its first content, its end, and its text;
    `started` is set at its first content, and each content chunk is appended to `seen` as it comes."""
    body = {"model": MODEL, "stream": True, "temperature": 0, "max_tokens": max_tokens,
            "stream_options": {"include_usage": True}, "messages": [{"role": "user", "content": content}]}
    sent = time.monotonic()
    first = None
    text = ""
    usage: dict[str, Any] = {}
    async with client.stream("POST", url + "/chat/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = first or time.monotonic()
                text += chunk["choices"][0]["delta"]["content"]
                if seen is not None:
                    seen.append(chunk["choices"][0]["delta"]["content"])
                if started is not None:
                    started.set()
    assert first is not None
    return {"sent": sent, "first": first, "end": time.monotonic(), "text": text, "usage": usage}


def test_requests_in_flight_together_all_stream_at_once(builtin: Server, builtin_key: str) -> None:
    async def run() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=120, headers=auth(builtin_key)) as client:
            return await asyncio.gather(*(_stream(client, builtin.v1, f"Count from {n} to 200, one number per line.", 48)
                                          for n in (1, 20, 40, 60)))

    results = asyncio.run(run())
    # Served one after another, the last would start only when the third had finished.
    assert max(r["first"] for r in results) < min(r["end"] for r in results)
    assert all(r["usage"]["completion_tokens"] == 48 for r in results)


def test_a_newcomer_starts_while_a_long_reply_is_still_generating(builtin: Server, builtin_key: str) -> None:
    # The long reply is not waited for to its end (400 tokens took past the test's timeout on a
    # loaded CI machine): what matters is that the short one ends while the long one still streams.
    # Served one after another, the short one would start only after the long one's 400 tokens.
    # "Within a step or two" is counted in the long reply's own tokens, not in seconds, so it holds
    # however busy the machine is; the time to first token itself is measured in bench/builtin_chat.py.
    async def run() -> tuple[bool, int, dict[str, Any]]:
        async with httpx.AsyncClient(timeout=120, headers=auth(builtin_key)) as client:
            streaming = asyncio.Event()
            seen: list[str] = []
            long = asyncio.create_task(_stream(client, builtin.v1, "Count from 1 to 500, one number per line.", 400,
                                               streaming, seen))
            waiting = asyncio.ensure_future(streaming.wait())
            await asyncio.wait([waiting, long], return_when=asyncio.FIRST_COMPLETED)
            assert waiting.done(), long.result()  # the long reply ended (or failed) before it streamed
            short_started = asyncio.Event()
            short_task = asyncio.create_task(_stream(client, builtin.v1, "Say hello.", 8, short_started))
            before = len(seen)
            await asyncio.wait([asyncio.ensure_future(short_started.wait()), short_task],
                               return_when=asyncio.FIRST_COMPLETED)
            long_steps = len(seen) - before  # the long reply's chunks while the short one got going
            short = await short_task
            long_still_going = not long.done()
            long.cancel()
            try:
                await long
            except asyncio.CancelledError:
                pass
            return long_still_going, long_steps, short

    long_still_going, long_steps, short = asyncio.run(run())
    assert long_still_going  # not queued behind the 400 tokens
    assert long_steps <= 32, long_steps  # a few decode steps (its prefill among them), not the ~400 left
    assert short["usage"]["completion_tokens"] <= 8 and short["text"]


def test_sequences_in_one_batch_keep_to_their_own_prompt(builtin: Server, builtin_key: str) -> None:
    words = ["giraffe", "volcano", "saxophone", "lighthouse"]

    async def run() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=120, headers=auth(builtin_key)) as client:
            return await asyncio.gather(*(_stream(client, builtin.v1, f"Repeat this word exactly once and nothing "
                                                  f"else: {w}", 12) for w in words))

    for word, result in zip(words, asyncio.run(run())):
        text = result["text"].lower()
        assert word in text, (word, text)
        assert not any(other in text for other in words if other != word), (word, text)

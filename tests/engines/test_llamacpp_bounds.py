"""The built-in llama.cpp engine prepares prompts off the event loop: a 30 MB count_tokens (under the
32 MiB body cap) keeps its prompt thread busy for seconds while other clients are answered at once."""

from __future__ import annotations

import asyncio
import os
import re
import time

import httpx

from tests.harness import Server, auth

MODEL = "qwen2.5-coder-0.5b-instruct"
HUGE_CHARS = 30_000_000


def cpu_seconds(pid: int) -> float:
    """CPU time the process has used so far (user + system)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_huge_count_tokens_never_stalls_other_clients(builtin: Server, builtin_key: str) -> None:
    sentence = "The quick brown fox jumps over the lazy dog near the river bank. "
    huge = {"model": MODEL, "messages": [{"role": "user", "content": sentence * (HUGE_CHARS // len(sentence))}]}
    small = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}

    async def run() -> tuple[list[float], float, int, int]:
        async with httpx.AsyncClient(timeout=300, headers=auth(builtin_key)) as client:
            pid = builtin.process.pid
            spent = cpu_seconds(pid)
            started = time.monotonic()
            counting = asyncio.create_task(client.post(builtin.v1 + "/chat/count_tokens", json=huge))
            # Wait until the server has worked on it for a while: receiving and parsing the body takes
            # well under a second of CPU, so past that it is rendering and tokenizing.
            while cpu_seconds(pid) - spent < 1.5 and not counting.done():
                await asyncio.sleep(0.05)
            assert not counting.done(), "the huge count ended before the small requests could be timed"
            waits: list[float] = []
            for _ in range(3):
                asked = time.monotonic()
                listed = await client.get(builtin.v1 + "/models")
                counted = await client.post(builtin.v1 + "/chat/count_tokens", json=small)
                waits.append(time.monotonic() - asked)
                assert listed.status_code == 200 and counted.status_code == 200, counted.text
                assert counted.json()["input_tokens"] < 50
            assert not counting.done()  # every small answer came while the huge one was still counting
            reply = await counting
            assert reply.status_code == 200, reply.text[:300]
            return waits, time.monotonic() - started, reply.json()["input_tokens"], reply.json()["context_window"]

    waits, huge_s, tokens, window = asyncio.run(run())
    assert max(waits) < 2.0, waits  # a models listing and a small count, each pair, while the huge one runs
    assert tokens > HUGE_CHARS // 10 and window == 8192  # counted in full, every token
    assert huge_s > max(waits)


def test_a_prompt_past_the_window_names_the_count_that_count_tokens_gives(builtin: Server, builtin_key: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "lorem ipsum dolor sit amet " * 3000}]}
    counted = httpx.post(builtin.v1 + "/chat/count_tokens", headers=auth(builtin_key), json=body, timeout=120)
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 8192
    refused = httpx.post(builtin.v1 + "/chat/completions", headers=auth(builtin_key), json={**body, "max_tokens": 1},
                         timeout=120)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    stated = re.search(r"the prompt is (\d+) tokens", refused.json()["error"]["message"])
    assert stated and int(stated.group(1)) == counted.json()["input_tokens"]

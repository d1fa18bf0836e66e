"""The tokens-per-minute window in Redis (limits/redis.py) with a window of 2 s, against the real
Redis: tokens count until they leave the window, a full window waits until its oldest tokens
leave, and the running `sum` it keeps agrees with a count of the fields after many seconds and
after a hash written without it (an older version's)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from inferd.limits.redis import RedisRateLimiter
from inferd.limits.resp import RespClient
from inferd.store.key_limits import Window
from tests.harness import Backend


@pytest.fixture
def url(backend: Backend) -> str:
    if not backend.redis_url:
        pytest.skip("in-process limits: no Redis in this run")
    return backend.redis_url


def run(url: str, body: Any) -> Any:
    async def main() -> Any:
        client = RespClient(url)
        try:
            limiter = RedisRateLimiter(client, "tpm-test:" + os.urandom(6).hex() + ":", window=2.0)
            return await body(client, limiter)
        finally:
            await client.close()

    return asyncio.run(main())


def test_tokens_count_until_they_leave_the_window(url: str) -> None:
    window = [Window("key", "w", None, 100)]

    async def body(client: RespClient, limiter: RedisRateLimiter) -> list[Any]:
        seen = []
        wait, state = await limiter.admit(window)
        seen.append((wait, state.tokens[:2] if state.tokens else None))
        await limiter.count_tokens(window, 60)
        wait, state = await limiter.admit(window)
        seen.append((wait, state.tokens[:2] if state.tokens else None))
        await limiter.count_tokens(window, 60)  # 120 of 100: the next call waits
        wait, state = await limiter.admit(window)
        seen.append((wait is not None and 1 <= wait <= 2, state.tokens[:2] if state.tokens else None))
        await asyncio.sleep(3.2)  # every token left the window
        wait, state = await limiter.admit(window)
        seen.append((wait, state.tokens[:2] if state.tokens else None))
        return seen

    assert run(url, body) == [(None, (100, 100)), (None, (100, 40)), (True, (100, -20)), (None, (100, 100))]


def test_the_running_sum_agrees_with_the_fields(url: str) -> None:
    """Tokens counted over several seconds, some leaving as others come: the sum kept equals the
    fields' total each time, and what is left matches the remaining script's full count."""
    window = [Window("key", "w", None, 10_000)]

    async def body(client: RespClient, limiter: RedisRateLimiter) -> list[bool]:
        name = limiter.names(window)[1].raw.decode()
        checks = []
        for step in range(10):
            await limiter.count_tokens(window, 7 + step)
            _, state = await limiter.admit(window)
            fields = await client.execute("HGETALL", name)
            pairs = dict(zip(fields[::2], fields[1::2]))
            seconds = {k: int(v) for k, v in pairs.items() if k not in (b"sum", b"low")}
            left = (await limiter.remaining(window))[0][1]
            checks.append(int(pairs[b"sum"]) == sum(seconds.values()) == 10_000 - state.tokens[1] == 10_000 - left)
            checks.append(int(pairs[b"low"]) == min(int(k) for k in seconds))
            await asyncio.sleep(0.45)
        return checks

    assert all(run(url, body))


def test_a_hash_without_its_sum_is_counted_in_full(url: str) -> None:
    """Fields written by an older version (no `sum`, no `low`) are counted once, then kept."""
    window = [Window("key", "w", None, 100)]

    async def body(client: RespClient, limiter: RedisRateLimiter) -> list[Any]:
        name = limiter.names(window)[1].raw.decode()
        now = int((await client.execute("TIME"))[0])
        await client.execute("HSET", name, now - 30, 500, now, 70, now - 1, 20)  # one field long gone
        await client.execute("EXPIRE", name, 60)
        _, state = await limiter.admit(window)
        await limiter.count_tokens(window, 5)
        _, after = await limiter.admit(window)
        return [state.tokens[1], after.tokens[1], await client.execute("HEXISTS", name, now - 30)]

    assert run(url, body) == [10, 5, 0]

"""Concurrent requests of one key on one server: the limit stays exact when the admission checks
of many requests share their trips to Redis (limits/redis.py `_Admissions`), even after Redis
lost its scripts."""

from __future__ import annotations

import asyncio
import subprocess

import httpx
import pytest

from tests.harness import Server, auth

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


def burst(server: Server, keys: list[str], each: int) -> dict[str, list[int]]:
    """`each` concurrent calls per key, all at once; the statuses per key."""

    async def fire() -> list[int]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            calls = [client.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY)
                     for _ in range(each) for key in keys]
            return [r.status_code for r in await asyncio.gather(*calls)]

    statuses = asyncio.run(fire())
    return {key: statuses[i::len(keys)] for i, key in enumerate(keys)}


def test_a_burst_admits_exactly_rpm_per_key(server: Server) -> None:
    keys = [server.create_key(rpm=7), server.create_key(rpm=13), server.create_key()]
    statuses = burst(server, keys, 30)
    assert sorted(statuses[keys[0]]).count(200) == 7 and statuses[keys[0]].count(429) == 23
    assert statuses[keys[1]].count(200) == 13 and statuses[keys[1]].count(429) == 17
    assert statuses[keys[2]] == [200] * 30
    assert [len(server.usage_rows(key)) for key in keys] == [7, 13, 30]


def test_limits_hold_after_redis_forgets_its_scripts(server: Server) -> None:
    if not server.backend.redis_url:
        pytest.skip("in-process limits: no Redis scripts to lose")
    subprocess.run(["redis-cli", "-u", server.backend.redis_url, "SCRIPT", "FLUSH"], check=True, capture_output=True)
    key = server.create_key(rpm=5)
    statuses = burst(server, [key], 20)[key]
    assert statuses.count(200) == 5 and statuses.count(429) == 15

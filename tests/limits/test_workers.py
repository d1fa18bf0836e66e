"""`inferd serve --workers 2` without Redis (`--workers N` needs nothing more): the
workers share one requests-per-minute window and one tokens-per-minute window per key, so no
limit is multiplied by the number of workers; spend is shared through the database, as between
any two processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.harness import Backend, Upstream, auth, serving
from tests.limits.governance import set_key

CHAT_TOML = """
[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
"""


def test_two_workers_without_redis_share_one_window(tmp_path: Path, backend: Backend, upstream: Upstream) -> None:
    local = Backend(backend.database_url, None, backend.redis_prefix + "workers:")
    with serving(tmp_path, local, upstream, CHAT_TOML, args=("--workers", "2")) as server:
        key = server.create_key(rpm=10)

        async def fire() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=40, max_keepalive_connections=0)  # new connections: both workers
            async with httpx.AsyncClient(timeout=30, limits=limits) as client:
                calls = [client.post(server.v1 + "/chat/completions", headers=auth(key),
                                     json={"model": "mock-chat", "messages": [{"role": "user", "content": "x"}]})
                         for _ in range(40)]
                return list(await asyncio.gather(*calls))

        replies = asyncio.run(fire())
        statuses = [r.status_code for r in replies]
        assert statuses.count(200) == 10 and statuses.count(429) == 30, [(r.status_code, r.text[:200]) for r in replies if r.status_code not in (200, 429)]
        waits = {int(r.headers["retry-after"]) for r in replies if r.status_code == 429}
        assert waits and all(1 <= wait <= 60 for wait in waits)
        assert len(server.usage_rows(key)) == 10


def test_two_workers_without_redis_share_one_token_window(tmp_path: Path, backend: Backend, upstream: Upstream) -> None:
    """A key whose tpm holds ten calls' tokens: ten calls through fresh connections (spread over
    both workers) are admitted, every later one is 429, whichever worker takes it."""
    local = Backend(backend.database_url, None, backend.redis_prefix + "workers-tpm:")
    body = {"model": "mock-chat", "messages": [{"role": "user", "content": "x"}]}
    with serving(tmp_path, local, upstream, CHAT_TOML, args=("--workers", "2")) as server:
        probe = server.create_key()
        first = httpx.post(server.v1 + "/chat/completions", headers=auth(probe), json=body, timeout=30)
        assert first.status_code == 200, first.text
        per_call = first.json()["usage"]["total_tokens"]
        assert per_call > 0
        key = server.create_key()
        # Set before its first call (no worker has it cached): after nine calls one more fits, after ten none.
        set_key(server, key, tpm=per_call * 9 + 1)
        statuses = []
        for _ in range(20):  # one at a time: no overshoot from calls in flight
            with httpx.Client(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as client:
                statuses.append(client.post(server.v1 + "/chat/completions", headers=auth(key), json=body).status_code)
        assert statuses == [200] * 10 + [429] * 10, statuses
        assert sum(row["prompt_tokens"] + row["completion_tokens"] for row in server.usage_rows(key)) == per_call * 10

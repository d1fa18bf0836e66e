"""Two server processes on one database and one Redis behave as one service."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.harness import Backend, Server, auth

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
LOCAL_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, backend: Backend, config_file: Path) -> Iterator[list[Server]]:
    """Two replicas sharing the run's database, a Redis (the local one when the run has none) and
    the data dir (replicas share it)."""
    shared = Backend(backend.database_url, backend.redis_url or LOCAL_REDIS, backend.redis_prefix + "replicas:")
    data_dir = tmp_path_factory.mktemp("replicas")
    servers: list[Server] = []
    try:
        for _ in range(2):
            servers.append(Server.start(data_dir, shared, config_file))
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_rate_limit_holds_across_replicas(replicas: list[Server]) -> None:
    limit = 5
    key = replicas[0].create_key(rpm=limit)

    async def fire() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            calls = [client.post(replicas[i % 2].v1 + "/chat/completions", headers=auth(key), json=BODY)
                     for i in range(3 * limit)]
            return [r.status_code for r in await asyncio.gather(*calls)]

    statuses = asyncio.run(fire())
    assert statuses.count(200) == limit
    assert statuses.count(429) == 2 * limit


def test_budget_is_shared_across_replicas(replicas: list[Server]) -> None:
    probe = replicas[0].create_key()
    httpx.post(replicas[0].v1 + "/chat/completions", headers=auth(probe), json=BODY)
    one = replicas[0].usage_rows(probe)[0]["cost_usd"]
    key = replicas[0].create_key(budget_usd=one * 2.5)
    statuses = [httpx.post(replicas[i % 2].v1 + "/chat/completions", headers=auth(key), json=BODY).status_code
                for i in range(3)]
    assert statuses == [200, 200, 200]
    for replica in replicas:  # spend reached on one replica is seen by both
        assert httpx.post(replica.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code == 402
    assert len(replicas[1].usage_rows(key)) == 3


def test_reply_rows_survive_sigkill(tmp_path: Path, backend: Backend, config_file: Path) -> None:
    server = Server.start(tmp_path, backend, config_file)
    key = server.create_key()
    try:
        blocking = httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY)
        streamed = httpx.post(server.v1 + "/chat/completions", headers=auth(key), json={**BODY, "stream": True})
        server.stop(signal.SIGKILL)  # no shutdown hook runs
    finally:
        server.stop()
    assert blocking.status_code == 200 and streamed.text.rstrip().endswith("[DONE]")
    rows = server.usage_rows(key)
    assert [r["status_code"] for r in rows] == [200, 200]


def test_postgres_and_redis_replicas_act_as_one(backend: Backend, request: pytest.FixtureRequest) -> None:
    """The deployment the issue names: two `inferd serve` on one PostgreSQL and one Redis."""
    if not backend.database_url.startswith("postgresql") or not backend.redis_url:
        pytest.skip("needs INFERD_DATABASE_URL on PostgreSQL and INFERD_REDIS_URL")
    replicas: list[Server] = request.getfixturevalue("replicas")
    limit = 7
    limited = replicas[0].create_key(rpm=limit)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            return list(await asyncio.gather(*[
                client.post(replicas[i % 2].v1 + "/chat/completions", headers=auth(limited), json=BODY)
                for i in range(3 * limit)]))

    answers = asyncio.run(burst())
    assert [r.status_code for r in answers].count(200) == limit
    refused = [r for r in answers if r.status_code != 200]
    assert len(refused) == 2 * limit and all(r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
                                             for r in refused)
    assert len(replicas[1].usage_rows(limited)) == limit  # one row per admitted call, whichever replica

    # usage rows written by both replicas appear in one report, on either replica
    key = replicas[0].create_key()
    for i in range(6):
        httpx.post(replicas[i % 2].v1 + "/chat/completions", headers=auth(key),
                   json={**BODY, "metadata": {"replica": str(i % 2)}}).raise_for_status()
    for replica in replicas:
        page = httpx.get(replica.v1 + "/usage", headers=auth(key)).json()
        assert len(page["data"]) == 6
        totals = httpx.get(replica.v1 + "/usage/summary", headers=auth(key),
                           params={"group_by": "metadata.replica"}).json()["data"]
        assert {g["group_value"]: g["requests"] for g in totals} == {"0": 3, "1": 3}

"""Two server processes on one database and one Redis behave as one service: each with a data
directory of its own (as on two machines), and one test with the shared directory of older
deployments."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import orjson
import pytest

from inferd.metering.journal_pg import settle_database
from inferd.store.db import create_engine
from tests.harness import Backend, Server, auth

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def start_replicas(tmp_path_factory: pytest.TempPathFactory, backend: Backend, config_file: Path,
                   shared_dir: bool, label: str) -> Iterator[list[Server]]:
    """Two replicas sharing the run's database and a Redis (the local one when the run has none),
    each with a data directory of its own unless `shared_dir`."""
    shared = Backend(backend.database_url, backend.redis_url or LOCAL_REDIS, backend.redis_prefix + label + ":")
    common = tmp_path_factory.mktemp(label)
    servers: list[Server] = []
    try:
        for number in range(2):
            data_dir = common if shared_dir else tmp_path_factory.mktemp(f"{label}-{number}")
            servers.append(Server.start(data_dir, shared, config_file))
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, backend: Backend, config_file: Path) -> Iterator[list[Server]]:
    """Two replicas, each with its own data directory (they share only the stores)."""
    yield from start_replicas(tmp_path_factory, backend, config_file, shared_dir=False, label="replicas")


def settled(replicas: list[Server]) -> None:
    """Fold every replica's usage journal now. Each replica folds its own within milliseconds of a
    reply; the tests read at once, so they fold them first (as a restart of each would)."""
    url = replicas[0].backend.database_url
    if not url.startswith("postgresql"):
        return  # SQLite: one journal beside the database file, folded by every reader

    async def go() -> None:
        engine = create_engine(url)
        try:
            for replica in replicas:
                await settle_database(engine.url, replica.data_dir)
        finally:
            await engine.dispose()

    asyncio.run(go())


def eventually(check: Callable[[], Any], timeout: float = 5.0) -> None:
    """Until `check` passes (what another replica folds is seen within milliseconds, not at once)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


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
    settled(replicas)
    one = replicas[0].usage_rows(probe)[0]["cost_usd"]
    key = replicas[0].create_key(budget_usd=one * 2.5)
    statuses = [httpx.post(replicas[i % 2].v1 + "/chat/completions", headers=auth(key), json=BODY).status_code
                for i in range(3)]
    assert statuses == [200, 200, 200]
    for replica in replicas:  # spend reached on one replica is seen by both
        assert httpx.post(replica.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code == 402
    settled(replicas)
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
    settled(replicas)
    assert len(replicas[1].usage_rows(limited)) == limit  # one row per admitted call, whichever replica

    # usage rows written by both replicas appear in one report, on either replica
    key = replicas[0].create_key()
    for i in range(6):
        httpx.post(replicas[i % 2].v1 + "/chat/completions", headers=auth(key),
                   json={**BODY, "metadata": {"replica": str(i % 2)}}).raise_for_status()
    for replica in replicas:  # without any help: each replica folds its own journal promptly
        def report(replica: Server = replica) -> None:
            page = httpx.get(replica.v1 + "/usage", headers=auth(key)).json()
            assert len(page["data"]) == 6
            totals = httpx.get(replica.v1 + "/usage/summary", headers=auth(key),
                               params={"group_by": "metadata.replica"}).json()["data"]
            assert {g["group_value"]: g["requests"] for g in totals} == {"0": 3, "1": 3}

        eventually(report)


def test_a_killed_replica_restarted_on_its_own_directory_loses_and_repeats_no_row(
        tmp_path: Path, backend: Backend, config_file: Path) -> None:
    """Two replicas with data directories of their own under load; one is SIGKILLed and started
    again on its directory: every answered call has exactly one row, none twice."""
    shared = Backend(backend.database_url, backend.redis_url or LOCAL_REDIS, backend.redis_prefix + "kill:")
    dirs = [tmp_path / "a", tmp_path / "b"]
    for folder in dirs:
        folder.mkdir()
    servers = [Server.start(folder, shared, config_file) for folder in dirs]
    key = servers[0].create_key()
    answered: list[str] = []

    async def load(seconds: float, offset: int) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            deadline = time.monotonic() + seconds
            number = offset

            async def one(tag: str, target: Server) -> None:
                try:
                    reply = await client.post(target.v1 + "/chat/completions", headers=auth(key),
                                              json={**BODY, "metadata": {"n": tag}})
                    if reply.status_code == 200:
                        answered.append(tag)
                except httpx.HTTPError:
                    pass  # in flight on the killed replica

            while time.monotonic() < deadline:
                await asyncio.gather(*(one(str(number + i), servers[i % 2]) for i in range(16)))
                number += 16

    try:
        async def kill_midway() -> None:
            await asyncio.sleep(1.0)
            await asyncio.to_thread(servers[0].stop, signal.SIGKILL)

        async def both() -> None:
            await asyncio.gather(load(2.0, 0), kill_midway())

        asyncio.run(both())
        servers[0] = Server.start(dirs[0], shared, config_file)  # its own directory: its start folds it
        settled(servers)
        rows = servers[1].usage_rows(key)
    finally:
        for server in servers:
            server.stop()
    tags = [orjson.loads(row["metadata"])["n"] for row in rows]
    assert len(answered) > 50
    assert len(tags) == len(set(tags)), "a row was folded twice"
    assert set(answered) <= set(tags), f"rows lost: {sorted(set(answered) - set(tags))[:10]}"


def test_replicas_sharing_one_data_directory(tmp_path_factory: pytest.TempPathFactory, backend: Backend,
                                             config_file: Path) -> None:
    """Older deployments give every replica the same data directory: that keeps working (usage
    journals side by side, files in the store), and a SIGKILLed replica's rows are folded by the
    other replica's readers."""
    replicas = start_replicas(tmp_path_factory, backend, config_file, shared_dir=True, label="shared-dir")
    servers = next(replicas)
    try:
        key = servers[0].create_key()
        for i in range(4):
            assert httpx.post(servers[i % 2].v1 + "/chat/completions", headers=auth(key),
                              json=BODY).status_code == 200
        servers[0].stop(signal.SIGKILL)
        assert len(servers[1].usage_rows(key)) == 4  # the dead replica's journal is in the shared folder
        uploaded = httpx.post(servers[1].v1 + "/files", headers=auth(key), data={"purpose": "batch"},
                              files={"file": ("in.jsonl", b'{"a": 1}\n')}).json()
        assert httpx.get(f"{servers[1].v1}/files/{uploaded['id']}/content", headers=auth(key)).content == \
            b'{"a": 1}\n'
    finally:
        replicas.close()

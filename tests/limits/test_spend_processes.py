"""Budgets without Redis: two `inferd serve` on one database see each other's spend within a
second (each re-reads a key's committed spend from the database once its view is a second old)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from inferd.limits.memory import SPEND_MAX_AGE_SECONDS as STALE_SECONDS
from tests.batches.conftest import Worker, content, create, request_line, wait_for
from tests.harness import Backend, Server, auth

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, backend: Backend, config_file: Path) -> Iterator[list[Server]]:
    """Two servers on the run's database (the same SQLite file, or the same PostgreSQL database)
    and no Redis, even when the run has one."""
    alone = Backend(backend.database_url, None, backend.redis_prefix + "no-redis:")
    servers: list[Server] = []
    try:
        for _ in range(2):
            servers.append(Server.start(tmp_path_factory.mktemp("no-redis"), alone, config_file))
        assert all("INFERD_REDIS_URL" not in server.env for server in servers)
        yield servers
    finally:
        for server in servers:
            server.stop()


def chat(server: Server, key: str) -> int:
    return httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY, timeout=30).status_code


def cost_of_one_call(server: Server) -> float:
    """What one BODY call costs, measured on a probe key."""
    probe = server.create_key()
    assert chat(server, probe) == 200
    cost = float(server.usage_rows(probe)[0]["cost_usd"])
    assert cost > 0
    return cost


def test_budget_spent_on_one_server_is_refused_on_the_other(pair: list[Server]) -> None:
    a, b = pair
    one = cost_of_one_call(a)
    key = a.create_key(budget_usd=one * 2.5)

    assert chat(b, key) == 200  # B has read the key's spend (0) and added its own call: one
    assert len(b.usage_rows(key)) == 1  # B's row is folded into the database: committed spend A can read
    assert [chat(a, key), chat(a, key)] == [200, 200]  # A reads one, spends two more: three
    assert chat(a, key) == 402
    time.sleep(STALE_SECONDS + 0.2)
    # B's own view says one; its re-read finds the three committed through both servers.
    refused = httpx.post(b.v1 + "/chat/completions", headers=auth(key), json=BODY, timeout=30)
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert len(a.usage_rows(key)) == 3
    assert abs(a.spend(key) - 3 * one) < 1e-12


def test_budget_first_seen_on_the_other_server_is_read_from_the_database(pair: list[Server]) -> None:
    a, b = pair
    one = cost_of_one_call(a)
    key = a.create_key(budget_usd=one * 1.5)
    assert [chat(a, key), chat(a, key), chat(a, key)] == [200, 200, 402]
    # No sleep needed: B has never seen this key, so its first check reads the database.
    assert chat(b, key) == 402
    # Calls that are not metered never answer 402.
    assert httpx.get(b.v1 + "/models", headers=auth(key), timeout=30).status_code == 200


def test_spend_is_not_counted_twice_by_the_re_read(pair: list[Server]) -> None:
    a, b = pair
    one = cost_of_one_call(a)
    key = a.create_key(budget_usd=one * 3.5)
    assert [chat(a, key), chat(a, key)] == [200, 200]  # A's view: two
    time.sleep(STALE_SECONDS + 0.2)
    # A's re-read finds two (its own commits), not two plus its own two again: two more fit.
    assert [chat(a, key), chat(a, key)] == [200, 200]
    assert chat(a, key) == 402
    time.sleep(STALE_SECONDS + 0.2)
    assert chat(b, key) == 402
    assert chat(a, key) == 402
    assert abs(a.spend(key) - 4 * one) < 1e-12


def test_a_separate_batch_worker_sees_spend_committed_by_the_server(pair: list[Server]) -> None:
    """`inferd batch-worker` beside a server, no Redis: once the worker has read a key's spend, the
    server spends the rest of the budget, and the worker's next batch line is refused (budget)."""
    a, _ = pair
    one = cost_of_one_call(a)
    key = a.create_key(budget_usd=one * 2.5)
    worker = Worker(a)
    try:
        first = create(a, key, [request_line("seen")])  # the worker reads the key's spend, then adds half a call
        assert wait_for(a, key, first["id"], ("completed",))["request_counts"]["completed"] == 1
        assert [chat(a, key), chat(a, key)] == [200, 200]  # past 2.5 calls' worth: the budget is spent
        assert chat(a, key) == 402
        spent = a.spend(key)
        time.sleep(STALE_SECONDS + 0.2)
        second = wait_for(a, key, create(a, key, [request_line("refused")])["id"], ("completed",))
        assert second["request_counts"] == {"total": 1, "completed": 0, "failed": 1}
        [error] = content(a, key, second["error_file_id"])
        assert error["custom_id"] == "refused" and error["error"]["code"] == "budget_exceeded", error
    finally:
        worker.stop()
    assert a.spend(key) == spent  # the refused line reached no engine and cost nothing
    assert len(a.usage_rows(key)) == 3

"""Monthly budgets: 402 once spend reaches the budget; overshoot bounded under concurrency."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from tests.harness import Server, auth

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


def cost_of_one(server: Server) -> float:
    probe = server.create_key()
    httpx.post(server.v1 + "/chat/completions", headers=auth(probe), json=BODY)
    return float(server.usage_rows(probe)[0]["cost_usd"])


def test_zero_budget_is_402_on_metered_calls_only(server: Server) -> None:
    key = server.create_key(budget_usd=0)
    refused = httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY)
    assert refused.status_code == 402
    assert refused.json()["error"]["type"] == "billing_error"
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert httpx.get(server.v1 + "/models", headers=auth(key)).status_code == 200
    assert server.usage_rows(key) == []


def test_budget_crossed_sequentially(server: Server) -> None:
    one = cost_of_one(server)
    key = server.create_key(budget_usd=one * 2.5)
    statuses = [httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code
                for _ in range(5)]
    assert statuses == [200, 200, 200, 402, 402]  # spend after 3 calls (3x) is at or above 2.5x
    assert abs(server.spend(key) - 3 * one) < 1e-12


def test_streams_update_spend(server: Server) -> None:
    one = cost_of_one(server)
    key = server.create_key(budget_usd=one * 0.5)
    streamed = httpx.post(server.v1 + "/chat/completions", headers=auth(key), json={**BODY, "stream": True})
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code == 402


def test_concurrent_requests_overshoot_at_most_what_was_in_flight(server: Server) -> None:
    one = cost_of_one(server)
    key = server.create_key(budget_usd=one * 3)

    async def fire(n: int) -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            async def call(i: int) -> int:
                body = {**BODY, "stream": i % 2 == 0}
                response = await client.post(server.v1 + "/chat/completions", headers=auth(key), json=body)
                await response.aread()
                return response.status_code
            return list(await asyncio.gather(*(call(i) for i in range(n))))

    statuses = asyncio.run(fire(24))
    admitted = statuses.count(200)
    assert set(statuses) <= {200, 402}
    rows = server.usage_rows(key)
    # Every completed request was billed, and spend equals the sum of its rows.
    assert len(rows) == admitted
    assert abs(server.spend(key) - sum(r["cost_usd"] for r in rows)) < 1e-12
    # Admission stopped once committed spend reached the budget: the overshoot is bounded by
    # what was in flight, and once they finished the key is refused.
    assert admitted >= 3 and admitted <= 24
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code == 402


def test_disconnected_streams_under_concurrency_are_billed(server: Server) -> None:
    key = server.create_key(budget_usd=1.0)

    async def fire() -> tuple[int, int]:
        async with httpx.AsyncClient(timeout=30) as client:
            async def leave_early() -> int:
                body = {"model": "mock-drip", "messages": BODY["messages"], "stream": True}
                async with client.stream("POST", server.v1 + "/chat/completions", headers=auth(key),
                                         json=body) as response:
                    words = 0
                    async for line in response.aiter_lines():
                        if line.startswith("data: {") and (json.loads(line[6:])["choices"] or [{}])[0].get(
                                "delta", {}).get("content"):
                            words += 1
                            if words == 2:
                                return response.status_code  # leave after the second word
                return response.status_code

            async def complete(stream: bool) -> int:
                body = {**BODY, "model": "mock-drip" if stream else "mock-chat", "stream": stream}
                response = await client.post(server.v1 + "/chat/completions", headers=auth(key), json=body)
                return response.status_code

            calls = [leave_early() for _ in range(6)] + [complete(i % 2 == 0) for i in range(6)]
            statuses = await asyncio.gather(*calls)
            return statuses.count(200), len(statuses)

    admitted, total = asyncio.run(fire())
    assert admitted == total == 12
    rows = _wait_rows(server, key, 12)
    assert len(rows) == 12
    assert sorted(r["status_code"] for r in rows).count(499) == 6  # the clients that left
    assert all(r["cost_usd"] > 0 for r in rows)
    assert abs(server.spend(key) - sum(r["cost_usd"] for r in rows)) < 1e-12


def _wait_rows(server: Server, key: str, count: int) -> list[dict]:
    """Rows of abandoned streams land once the server notices the disconnect."""
    for _ in range(100):
        rows = server.usage_rows(key)
        if len(rows) >= count:
            return rows
        time.sleep(0.1)
    return server.usage_rows(key)

"""Monthly budgets: 402 once spend reaches the budget; overshoot bounded under concurrency."""

from __future__ import annotations

import asyncio

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

"""The pool's pieces on their own: routing orders, cooldowns, and the line of waiting calls."""

from __future__ import annotations

import asyncio
import time

import pytest

from inferd.calls.pool import Pool
from inferd.calls.routing import affinity
from inferd.config_models import ModelConfig
from inferd.errors import ModelOverloaded


def pool_of(*names: str, routing: str = "least-busy", max_in_flight: int | None = None,
            queue_timeout_s: float = 30.0, clock: list[float] | None = None) -> Pool:
    model = ModelConfig(id="m", routing=routing, cooldown_s=5.0, queue_timeout_s=queue_timeout_s,
                        deployments=tuple(ModelConfig(id="m", deployment=n, max_in_flight=max_in_flight)
                                          for n in names))
    now = clock if clock is not None else [0.0]
    return Pool(model, clock=lambda: now[0])


def test_rendezvous_moves_only_the_keys_of_a_removed_deployment() -> None:
    pool = pool_of("a", "b", "c", "d")
    keys = [f"user-{n}" for n in range(400)]
    owner = {k: affinity(pool.states, [0, 1, 2, 3], k)[0] for k in keys}
    assert all(60 <= list(owner.values()).count(i) <= 140 for i in range(4))  # about a quarter each
    after = {k: affinity(pool.states, [0, 1, 3], k)[0] for k in keys}  # "c" (2) is down
    assert all(after[k] == owner[k] for k in keys if owner[k] != 2)
    assert all(after[k] != 2 for k in keys)


def test_cooldown_doubles_is_capped_and_ends_on_success() -> None:
    clock = [100.0]
    pool = pool_of("a", "b", clock=clock)
    pool.failed(0, "connect")
    assert not pool.healthy(0) and pool.candidates(None) == [1, 0]  # cooling ones last
    clock[0] += 5.01
    assert pool.healthy(0)
    pool.failed(0, "timeout")
    clock[0] += 9.9
    assert not pool.healthy(0)  # 10 s the second time in a row
    for _ in range(10):
        pool.failed(0, "status_5xx")
    assert pool.states[0].cooldown_until - clock[0] == pytest.approx(60.0)  # capped
    pool.succeeded(0)
    assert pool.healthy(0) and pool.states[0].streak == 0
    assert pool.states[0].failures == {"connect": 1, "timeout": 1, "status_5xx": 10, "status_429": 0}


def test_every_deployment_cooling_is_still_tried_soonest_ending_first() -> None:
    clock = [0.0]
    pool = pool_of("a", "b", "c", clock=clock)
    pool.failed(1, "connect")
    clock[0] = 1.0
    pool.failed(0, "connect")
    clock[0] = 2.0
    pool.failed(2, "connect")
    assert pool.candidates(None) == [1, 0, 2]


def test_waiting_calls_are_served_first_come_first_served_and_time_out() -> None:
    async def scenario() -> None:
        pool = pool_of("a", max_in_flight=1)
        first = await pool.acquire(None, [], time.monotonic() + 5)
        assert first == 0
        order: list[int] = []

        async def wait(n: int) -> None:
            index = await pool.acquire(None, [], time.monotonic() + 5)
            assert index == 0
            order.append(n)
            await asyncio.sleep(0.01)
            pool.release(0)

        waiters = [asyncio.create_task(wait(n)) for n in range(4)]
        await asyncio.sleep(0.05)
        assert order == []  # all in line behind the first call
        pool.release(0)
        await asyncio.gather(*waiters)
        assert order == [0, 1, 2, 3]
        held = await pool.acquire(None, [], time.monotonic() + 5)
        with pytest.raises(ModelOverloaded) as raised:
            await pool.acquire(None, [], time.monotonic() + 0.1)
        assert raised.value.headers["Retry-After"] == "30"
        pool.release(held)
        assert pool.states[0].in_flight == 0 and not pool._waiters

    asyncio.run(scenario())


def test_round_robin_credits_give_each_its_weight() -> None:
    pool = pool_of("a", "b", routing="round-robin")
    pool.states[0].weight = 3.0
    picks = [pool.candidates(None)[0] for _ in range(40)]
    assert picks.count(0) == 30 and picks.count(1) == 10

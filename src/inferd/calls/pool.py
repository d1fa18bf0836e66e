"""A model's deployments at run time: which one a call tries next, calls in flight, cooldowns, and
the first-come-first-served wait when every deployment is full.

State is per process: a deployment that fails is put in cooldown by the process that saw it fail,
and each replica of inferd learns it on its own (a few failed attempts each, then the cooldown).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from inferd.calls.deployment_state import DeploymentState
from inferd.calls.routing import order
from inferd.config_models import ModelConfig
from inferd.config_pools import MAX_COOLDOWN_S
from inferd.errors import ModelOverloaded

WAIT = -1  # `Pool.take`: every untried deployment is full: wait in line with `acquire`


@dataclass(eq=False)
class _Waiter:
    """A call waiting in line: the future it is handed its slot's index on, and the deployments it
    already tried (a freed slot on one of those goes to the next in line)."""

    slot: asyncio.Future[int]
    tried: frozenset[int]


class Pool:
    """The runtime side of one model's pool of deployments."""

    def __init__(self, model: ModelConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.routing = model.routing
        self.cooldown_s = model.cooldown_s
        self.queue_timeout_s = model.queue_timeout_s
        self.states = [DeploymentState(d.deployment_name, d.weight, d.max_in_flight) for d in model.pool]
        self._clock = clock
        self._turn = [0.0] * len(self.states)  # smooth weighted round-robin credits
        self._waiters: deque[_Waiter] = deque()
        self._single = len(self.states) == 1

    def healthy(self, index: int) -> bool:
        """Not in cooldown."""
        return self.states[index].cooldown_until <= self._clock()

    def candidates(self, affinity: str | None, tried: Sequence[int] = ()) -> list[int]:
        """The untried deployments in the order to try them: healthy ones by the routing, then those
        in cooldown, soonest-ending first (tried rather than failing the call untried)."""
        now = self._clock()
        healthy = [i for i, s in enumerate(self.states) if i not in tried and s.cooldown_until <= now]
        cooling = sorted((i for i, s in enumerate(self.states) if i not in tried and s.cooldown_until > now),
                         key=lambda i: self.states[i].cooldown_until)
        return order(self.routing, self.states, healthy, affinity, self._turn) + cooling

    def take(self, affinity: str | None, tried: Sequence[int]) -> int | None:
        """A slot on the best untried deployment without waiting: its index; WAIT when every untried
        one is full; None when all were tried. A free slot is never one a waiting call could use
        (`release` hands those over), so taking it overtakes nobody."""
        if self._single and not tried:  # a pool of one: the usual case
            state = self.states[0]
            if state.max_in_flight is None or state.in_flight < state.max_in_flight:
                state.in_flight += 1
                state.attempts += 1
                return 0
        candidates = self.candidates(affinity, tried)
        if not candidates:
            return None
        taken = self._take(candidates)
        return WAIT if taken is None else taken

    def _take(self, candidates: list[int]) -> int | None:
        for index in candidates:
            state = self.states[index]
            if state.has_room():
                state.in_flight += 1
                state.attempts += 1
                return index
        return None

    async def acquire(self, affinity: str | None, tried: Sequence[int], deadline: float) -> int | None:
        """A slot on the best untried deployment: its index, held until `release`. When every untried
        deployment is full, waits in line (first come, first served: `release` hands the freed slot
        to the first waiting call that may use it) until then or `deadline` (monotonic) passes:
        then 503 `model_overloaded`. None when all were tried."""
        candidates = self.candidates(affinity, tried)
        if not candidates:
            return None
        taken = self._take(candidates)
        if taken is not None:
            return taken
        waiter = _Waiter(asyncio.get_running_loop().create_future(), frozenset(tried))
        self._waiters.append(waiter)
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ModelOverloaded(self.queue_timeout_s)
            try:
                return await asyncio.wait_for(asyncio.shield(waiter.slot), left)
            except asyncio.TimeoutError:
                if waiter.slot.done():  # handed a slot in the same turn as the deadline: take it
                    return waiter.slot.result()
                raise ModelOverloaded(self.queue_timeout_s) from None
        except BaseException:
            # Cancelled (the client left) after a slot was handed over: pass it on down the line.
            if waiter.slot.done() and not waiter.slot.cancelled():
                self.release(waiter.slot.result())
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self, index: int) -> None:
        """The call on this deployment ended: its slot goes to the first call in line that has not
        tried this deployment yet, counted as taken for it, so no call arriving meanwhile can take it."""
        for waiter in self._waiters:
            if index not in waiter.tried and not waiter.slot.done():
                self._waiters.remove(waiter)
                self.states[index].attempts += 1
                waiter.slot.set_result(index)
                return
        self.states[index].in_flight -= 1

    def failed(self, index: int, reason: str) -> None:
        """An attempt failed for `reason`: the deployment cools down, twice as long each time in a row."""
        state = self.states[index]
        state.failures[reason] = state.failures.get(reason, 0) + 1
        state.streak += 1
        pause = min(self.cooldown_s * 2 ** min(state.streak - 1, 16), MAX_COOLDOWN_S)
        state.cooldown_until = self._clock() + pause

    def probe_failed(self, index: int, reason: str) -> None:
        """A health probe failed: a healthy deployment starts a cooldown (one cooling already stays as it is)."""
        if self.healthy(index):
            self.failed(index, reason)

    def succeeded(self, index: int) -> None:
        """An attempt succeeded (or the probe answered 2xx): the cooldown ends."""
        state = self.states[index]
        state.streak = 0
        state.cooldown_until = 0.0

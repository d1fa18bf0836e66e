"""The attempts of one call: the model's deployments in routing order, each once,
waiting in the pool's line when every one is full, then each fallback's; for a paced call (batch
lines), only deployments with a free slot of its pacer (calls/pacing.py)."""

from __future__ import annotations

import time
from typing import Iterable, Protocol

from inferd.auth.key_record import KeyRecord
from inferd.calls.pacing import Pacer
from inferd.calls.pool import WAIT, Pool
from inferd.catalogue import Model
from inferd.engines.base import Engine
from inferd.observe.metrics import Metrics

SESSION_HEADER = b"x-session-affinity"  # the routing key of a request that names no `user`


def session_key(user: object, session: str | None = None,
                headers: Iterable[tuple[bytes, bytes]] = ()) -> str | None:
    """The key an `affinity` pool routes a request by: its `user` (a non-empty string), else the
    session its caller names (a conversation), else its `x-session-affinity` header (`headers`: the
    raw ASGI ones, read only when nothing before answered)."""
    if isinstance(user, str) and user:
        return user
    if session:
        return session
    for name, value in headers:
        if name == SESSION_HEADER:
            return value.decode("latin-1") or None
    return None


def affinity_key(model: Model, user: object, session: str | None = None,
                 headers: Iterable[tuple[bytes, bytes]] = ()) -> str | None:
    """`session_key` for a model whose routing is `affinity`; None for any other (no key is looked
    for where none would be used: the hot routes pay nothing for it)."""
    if model.config.routing != "affinity":
        return None
    return session_key(user, session, headers)


class Fallbacks(Protocol):
    """What a route asks of its call stage (calls/stage.py) once the model's deployments are spent."""

    @property
    def metrics(self) -> Metrics: ...

    def fallbacks(self, model: Model, key: KeyRecord, capability: type[Engine]) -> list[Model]:
        """The model's fallbacks the key may use now that can serve the same capability, in order."""
        ...


class Route:
    """The attempts of one call: the model's deployments in routing order (each once), then each
    fallback's. `next` takes a slot on the next one (waiting in line when all are full), None when
    nothing is left to try; the caller frees it with `release`."""

    __slots__ = ("_stage", "_origin", "_model", "_key", "_capability", "_affinity", "_tried", "_deadline", "_fallbacks")

    def __init__(self, stage: Fallbacks, model: Model, key: KeyRecord, capability: type[Engine],
                 affinity: str | None) -> None:
        self._stage = stage
        self._origin = model.id
        self._model = model
        self._key = key
        self._capability = capability
        self._affinity = affinity
        self._tried: list[int] = []
        self._deadline = 0.0  # set when the call first has to wait for a slot
        self._fallbacks: list[Model] | None = None

    async def next(self) -> tuple[Model, int] | None:
        """(model, deployment index) of the next attempt, its slot held."""
        while True:
            pool = self._model.pool
            index = pool.take(self._affinity, self._tried)
            if index is WAIT:
                index = await self._wait(pool, self._tried)
            if index is not None:
                self._tried.append(index)
                return self._model, index
            if not self._fall_back():
                return None

    def release(self, model: Model, index: int) -> None:
        """The attempt on this deployment ended: free its slot."""
        model.pool.release(index)

    async def _wait(self, pool: Pool, skip: list[int]) -> int | None:
        """Wait in the pool's line for a slot (back-pressure: `queue_timeout_s` from the first wait)."""
        if not self._deadline:
            self._deadline = time.monotonic() + self._model.config.queue_timeout_s
        return await pool.acquire(self._affinity, skip, self._deadline)

    def _fall_back(self) -> bool:
        """Move on to the next fallback; False when none is left."""
        if self._fallbacks is None:
            self._fallbacks = self._stage.fallbacks(self._model, self._key, self._capability)
        if not self._fallbacks:
            return False
        fallback = self._fallbacks.pop(0)
        self._stage.metrics.fallback(self._origin, fallback.id)
        self._model = fallback
        self._tried = []
        self._deadline = 0.0
        return True


class PacedRoute(Route):
    """A paced call's attempts (batch lines): as `Route`, but only on deployments with a free slot
    of the pacer, held with the pool's slot. When every untried deployment is full it waits for one
    to free a slot rather than move on to a fallback, and it waits for a full healthy deployment
    rather than try one in cooldown."""

    __slots__ = ("_pacer",)

    def __init__(self, stage: Fallbacks, model: Model, key: KeyRecord, capability: type[Engine],
                 affinity: str | None, pacer: Pacer) -> None:
        super().__init__(stage, model, key, capability, affinity)
        self._pacer = pacer

    async def next(self) -> tuple[Model, int] | None:
        """(model, deployment index) of the next attempt, its pool slot and pacer slot held."""
        while True:
            model, pool, pacer = self._model, self._model.pool, self._pacer
            untried = [i for i in range(len(model.deployments)) if i not in self._tried]
            full = [i for i in untried if pacer.full(model.deployments[i].name)]
            skip = self._tried + full
            if any(pool.healthy(i) for i in full):
                skip += [i for i in untried if i not in full and not pool.healthy(i)]
            index = pool.take(self._affinity, skip)
            if index is WAIT:
                index = await self._wait(pool, skip)
            if index is not None:
                name = model.deployments[index].name
                if pacer.full(name):  # other lines filled it while this one waited in the pool's line
                    pool.release(index)
                    continue
                pacer.hold(name)
                self._tried.append(index)
                return model, index
            if full:
                await pacer.freed()
                continue
            if not self._fall_back():
                return None

    def release(self, model: Model, index: int) -> None:
        """Free the pool's slot and the pacer's."""
        model.pool.release(index)
        self._pacer.release(model.deployments[index].name)

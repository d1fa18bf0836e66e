"""A cap on one kind of caller's calls in flight on each deployment, whatever the model's routing.

Batch lines use one (`[batches] max_concurrency` lines in flight per
deployment): the call stage lets a paced call take only a deployment with a free slot of its pacer
and holds that slot for the attempt, so the cap follows the deployment a line is actually sent to
(failover and fallbacks included) rather than its model. Normal API calls carry no pacer: they
get the plain route (calls/route.py) and pay nothing beyond the check that picks it.

Slots are keyed by deployment name (unique across the catalogue) and counted per process, as the
pools' own state is (calls/pool.py).
"""

from __future__ import annotations

import asyncio


class Pacer:
    """At most `limit` paced calls at once on each deployment."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}
        self._waiters: list[asyncio.Future[None]] = []

    def full(self, deployment: str) -> bool:
        """Whether the deployment has no free slot."""
        return self._held.get(deployment, 0) >= self.limit

    def hold(self, deployment: str) -> None:
        """Take a slot (the caller checked `full` in the same step of the event loop)."""
        self._held[deployment] = self._held.get(deployment, 0) + 1

    def release(self, deployment: str) -> None:
        """Free a slot: every call waiting in `freed` looks again, in the order they came."""
        left = self._held[deployment] - 1
        if left:
            self._held[deployment] = left
        else:
            del self._held[deployment]
        # All of them: each waits for its own model's deployments, which this one may not be.
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def freed(self) -> None:
        """Until some deployment frees a slot."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:  # cancelled before a release woke it
                self._waiters.remove(waiter)

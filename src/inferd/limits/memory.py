"""Limits for one process: a deque of timestamps per key, and a dict of spend."""

from __future__ import annotations

import math
import time
from collections import deque

from inferd.limits.base import WINDOW_SECONDS, SpendLoader, current_month


class MemoryRateLimiter:
    """Exact sliding window: a request is admitted while fewer than `limit` fall in the last minute."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self._window = window
        self._hits: dict[str, deque[float]] = {}

    async def hit(self, key: str, limit: int, units: int = 1) -> int | None:
        """Count `units` requests; None when admitted, else seconds until enough slots free."""
        now = time.monotonic()
        hits = self._hits.get(key)
        if hits is None:
            hits = self._hits[key] = deque()
        cutoff = now - self._window
        while hits and hits[0] <= cutoff:
            hits.popleft()
        excess = len(hits) + units - limit
        if excess > 0:
            if excess > len(hits):  # more units than the limit: never admitted
                return math.ceil(self._window)
            return max(1, math.ceil(hits[excess - 1] + self._window - now))
        hits.extend([now] * units)
        return None

    async def close(self) -> None:
        """Nothing to release."""


class MemorySpendCounter:
    """Spend kept in memory, loaded from the database on the first call of a key in a month."""

    def __init__(self, loader: SpendLoader) -> None:
        self._load = loader
        self._spend: dict[tuple[str, str], float] = {}

    async def current(self, key: str) -> float:
        """Spend so far this month."""
        slot = (key, current_month())
        spend = self._spend.get(slot)
        if spend is None:
            loaded = await self._load(*slot)
            # A commit may have landed while loading; keep whichever is larger.
            spend = self._spend[slot] = max(loaded, self._spend.get(slot, 0.0))
        return spend

    async def add(self, amounts: dict[tuple[str, str], float]) -> None:
        """Add committed costs to the keys already loaded (others load fresh when first asked)."""
        for slot, cost in amounts.items():
            if slot in self._spend:
                self._spend[slot] += cost

    async def close(self) -> None:
        """Nothing to release."""

"""Limits without Redis: a deque of timestamps per rate window, and each key's spend re-read
from the database at most once a second."""

from __future__ import annotations

import logging
import time
from collections import deque

from inferd.limits.base import WINDOW_SECONDS, SpendLoader, current_month, window_wait

log = logging.getLogger("inferd.limits")

# How old this process's view of a key's spend may grow before the next call re-reads it.
# Other processes on the same database (a second `inferd serve`, `inferd batch-worker`, uvicorn
# workers) commit spend this process never hears of; a second bounds how long it stays unseen.
SPEND_MAX_AGE_SECONDS = 1.0


# A sweep of idle windows runs once this many new windows were opened since the last one (or as many
# as were left then, when more: each sweep then costs O(1) per window opened, never a scan per request).
SWEEP_AFTER_NEW_WINDOWS = 1024


class MemoryRateLimiter:
    """Exact sliding window: a request is admitted while fewer than `limit` fall in the last minute.

    A window whose newest hit has left it is the same as none, so the sweep drops them: the map holds
    the keys of the last minute (and those opened since the last sweep), not every key ever seen."""

    def __init__(self, window: float = WINDOW_SECONDS, sweep_after: int = SWEEP_AFTER_NEW_WINDOWS) -> None:
        self._window = window
        self._hits: dict[str, deque[float]] = {}
        self._sweep_after = sweep_after
        self._opened = 0  # windows opened since the last sweep
        self._next_sweep = sweep_after

    def __len__(self) -> int:
        """How many windows are held."""
        return len(self._hits)

    def _sweep(self, now: float) -> None:
        """Drop every window with no hit in the last `window` seconds."""
        cutoff = now - self._window
        self._hits = {key: hits for key, hits in self._hits.items() if hits and hits[-1] > cutoff}
        self._opened = 0
        self._next_sweep = max(self._sweep_after, len(self._hits))

    async def hit(self, key: str, limit: int, units: int = 1) -> int | None:
        """Count `units` requests; None when admitted, else seconds until enough slots free."""
        now = time.monotonic()
        hits = self._hits.get(key)
        if hits is None:
            self._opened += 1
            if self._opened >= self._next_sweep:
                self._sweep(now)
            hits = self._hits[key] = deque()
        cutoff = now - self._window
        while hits and hits[0] <= cutoff:
            hits.popleft()
        wait = window_wait(len(hits), units, limit, hits.__getitem__, now, self._window)
        if wait is None:
            hits.extend([now] * units)
        return wait

    async def close(self) -> None:
        """Nothing to release."""


class _Spend:
    """One key's month as this process sees it."""

    __slots__ = ("usd", "added", "fresh_until")

    def __init__(self) -> None:
        self.usd = 0.0  # the last read plus what this process committed since
        self.added = 0.0  # everything this process committed, ever: reads mark it to count what came after
        self.fresh_until = 0.0  # monotonic deadline of the last read; 0 until a first read succeeds


class MemorySpendCounter:
    """Committed spend per key and month: read from the database (where every process's commits
    land), plus what this process committed since the read, re-read once the read is older than
    `max_age` seconds.

    The hot path is a dict lookup and one monotonic-clock comparison; the re-read happens at most
    once per `max_age` per key (on SQLite a synchronous primary-key read, on PostgreSQL one query),
    and calls arriving while it runs use the value it replaces. So spend another process committed
    counts here within `max_age`, and a budget is overshot by at most what all processes admitted
    in that time on top of the calls in flight.
    """

    def __init__(self, loader: SpendLoader, max_age: float = SPEND_MAX_AGE_SECONDS) -> None:
        self._load = loader
        self._max_age = max_age
        self._spend: dict[tuple[str, str], _Spend] = {}
        self._month = ""

    async def current(self, key: str) -> float:
        """Spend so far this month."""
        slot = (key, current_month())
        entry = self._spend.get(slot)
        if entry is not None and time.monotonic() < entry.fresh_until:
            return entry.usd
        return await self._read(slot, entry)

    async def _read(self, slot: tuple[str, str], entry: _Spend | None) -> float:
        if entry is None:
            if slot[1] != self._month:  # a new month: last month's entries are never asked again
                self._spend = {s: e for s, e in self._spend.items() if s[1] == slot[1]}
                self._month = slot[1]
            entry = self._spend[slot] = _Spend()
        started = time.monotonic()
        loaded_before = entry.fresh_until > 0.0
        if loaded_before:
            # Calls that arrive while this read runs use the value it replaces, not a read each.
            entry.fresh_until = started + self._max_age
        mark = entry.added
        try:
            committed = await self._load(*slot)
        except Exception as exc:
            if not loaded_before:
                raise  # nothing to answer with
            log.warning("re-reading the spend of %s failed, keeping the last value read: %s", slot[0], exc)
            return entry.usd
        # The read holds every commit before it began; add ours that came after. A commit of ours
        # that raced the read may count twice, until the next read (never less than committed).
        entry.usd = committed + (entry.added - mark)
        entry.fresh_until = max(entry.fresh_until, started + self._max_age)
        return entry.usd

    async def add(self, amounts: dict[tuple[str, str], float]) -> None:
        """Add this process's committed costs to the keys it has seen (others are read when first asked)."""
        for slot, cost in amounts.items():
            entry = self._spend.get(slot)
            if entry is not None:
                entry.usd += cost
                entry.added += cost

    async def close(self) -> None:
        """Nothing to release."""

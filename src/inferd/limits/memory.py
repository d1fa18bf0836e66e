"""Limits without Redis: deques of timestamps (and tokens) per window, and each budget's spend
re-read from the database at most once a second."""

from __future__ import annotations

import logging
import time
from collections import deque

from typing import Sequence

from inferd.limits.base import WINDOW_SECONDS, RateState, SpendLoader, tokens_wait, window_wait
from inferd.limits.periods import current_label, day_labels, since_label
from inferd.store.key_limits import Budget, Window
from inferd.store.usage_write import Amounts

log = logging.getLogger("inferd.limits")

# How old this process's view of a key's spend may grow before the next call re-reads it.
# Other processes on the same database (a second `inferd serve`, `inferd batch-worker`, uvicorn
# workers) commit spend this process never hears of; a second bounds how long it stays unseen.
SPEND_MAX_AGE_SECONDS = 1.0


# A sweep of idle windows runs once this many new windows were opened since the last one (or as many
# as were left then, when more: each sweep then costs O(1) per window opened, never a scan per request).
SWEEP_AFTER_NEW_WINDOWS = 1024


class MemoryRateLimiter:
    """Exact sliding windows: a request is admitted while fewer than `rpm` requests, and fewer than
    `tpm` tokens, of each window it counts in fall in the last minute.

    A window whose newest entry has left it is the same as none, so the sweep drops them: the maps
    hold the windows of the last minute (and those opened since the last sweep), not every key ever seen."""

    def __init__(self, window: float = WINDOW_SECONDS, sweep_after: int = SWEEP_AFTER_NEW_WINDOWS) -> None:
        self._window = window
        self._hits: dict[str, deque[float]] = {}
        self._tokens: dict[str, deque[tuple[float, int]]] = {}
        self._token_sums: dict[str, int] = {}
        self._sweep_after = sweep_after
        self._opened = 0  # windows opened since the last sweep
        self._next_sweep = sweep_after

    def __len__(self) -> int:
        """How many windows are held."""
        return len(self._hits) + len(self._tokens)

    def _sweep(self, now: float) -> None:
        """Drop every window with nothing in the last `window` seconds."""
        cutoff = now - self._window
        self._hits = {key: hits for key, hits in self._hits.items() if hits and hits[-1] > cutoff}
        self._tokens = {key: held for key, held in self._tokens.items() if held and held[-1][0] > cutoff}
        self._token_sums = {key: self._token_sums[key] for key in self._tokens}
        self._opened = 0
        self._next_sweep = max(self._sweep_after, len(self._hits) + len(self._tokens))

    def _opening(self, now: float) -> None:
        self._opened += 1
        if self._opened >= self._next_sweep:
            self._sweep(now)

    def _requests(self, key: str, now: float) -> deque[float]:
        hits = self._hits.get(key)
        if hits is None:
            self._opening(now)
            hits = self._hits[key] = deque()
        cutoff = now - self._window
        while hits and hits[0] <= cutoff:
            hits.popleft()
        return hits

    def _held_tokens(self, key: str, now: float) -> deque[tuple[float, int]]:
        held = self._tokens.get(key)
        if held is None:
            self._opening(now)
            held = self._tokens[key] = deque()
            self._token_sums[key] = 0
        cutoff = now - self._window
        while held and held[0][0] <= cutoff:
            self._token_sums[key] -= held.popleft()[1]
        return held

    async def hit(self, key: str, limit: int, units: int = 1) -> int | None:
        """Count `units` requests in one window; None when admitted, else seconds until enough slots free."""
        wait, _ = await self.admit((Window("key", key, limit, None),), units)
        return wait

    async def admit(self, windows: Sequence[Window], units: int = 1) -> tuple[int | None, RateState]:
        """Check every window; count the call in all of them only when all admit it. (On every
        call of a key with a window: one pass over the windows, no intermediate lists.)"""
        now = time.monotonic()
        window = self._window
        wait: int | None = None
        counted: list[tuple[int, deque[float]]] = []
        tokens: tuple[int, int, float] | None = None
        for spec in windows:
            rpm = spec.rpm
            if rpm is not None:
                hits = self._requests(spec.name, now)
                verdict = window_wait(len(hits), units, rpm, hits.__getitem__, now, window)
                if verdict is not None and (wait is None or verdict > wait):
                    wait = verdict
                counted.append((rpm, hits))
            tpm = spec.tpm
            if tpm is not None:
                held = self._held_tokens(spec.name, now)
                total = self._token_sums[spec.name]
                verdict = tokens_wait(held, total, tpm, now, window)
                if verdict is not None and (wait is None or verdict > wait):
                    wait = verdict
                if tokens is None or tpm - total < tokens[1]:
                    tokens = (tpm, tpm - total, held[0][0] + window - now if held else 0.0)
        requests: tuple[int, int, float] | None = None
        for rpm, hits in counted:
            if wait is None:
                if units == 1:
                    hits.append(now)
                else:
                    hits.extend([now] * units)
            left = rpm - len(hits)
            if requests is None or left < requests[1]:
                requests = (rpm, left, hits[0] + window - now if hits else 0.0)
        return wait, RateState(requests, tokens)

    async def remaining(self, windows: Sequence[Window]) -> list[tuple[int | None, int | None]]:
        """What is left of each window, counting nothing."""
        now = time.monotonic()
        left: list[tuple[int | None, int | None]] = []
        for spec in windows:
            requests = spec.rpm - len(self._requests(spec.name, now)) if spec.rpm is not None else None
            tokens = None
            if spec.tpm is not None:
                self._held_tokens(spec.name, now)
                tokens = spec.tpm - self._token_sums[spec.name]
            left.append((None if requests is None else max(0, requests), None if tokens is None else max(0, tokens)))
        return left

    async def count_tokens(self, windows: Sequence[Window], tokens: int) -> None:
        """Add a finished call's tokens to each window."""
        now = time.monotonic()
        for spec in windows:
            self._held_tokens(spec.name, now).append((now, tokens))
            self._token_sums[spec.name] += tokens

    async def close(self) -> None:
        """Nothing to release."""


class _Spend:
    """One owner's period as this process sees it."""

    __slots__ = ("usd", "added", "fresh_until")

    def __init__(self) -> None:
        self.usd = 0.0  # the last read plus what this process committed since
        self.added = 0.0  # everything this process committed, ever: reads mark it to count what came after
        self.fresh_until = 0.0  # monotonic deadline of the last read; 0 until a first read succeeds


class MemorySpendCounter:
    """Committed spend per owner and period: read from the database (where every process's commits
    land), plus what this process committed since the read, re-read once the read is older than
    `max_age` seconds.

    The hot path is a dict lookup and one monotonic-clock comparison per budget; the re-read happens
    at most once per `max_age` per budget (on SQLite a synchronous index read, on PostgreSQL one
    query), and calls arriving while it runs use the value it replaces. So spend another process
    committed counts here within `max_age`, and a budget is overshot by at most what all processes
    admitted in that time on top of the calls in flight.
    """

    def __init__(self, loader: SpendLoader, max_age: float = SPEND_MAX_AGE_SECONDS) -> None:
        self._load = loader
        self._max_age = max_age
        self._spend: dict[tuple[str, str, str], _Spend] = {}
        self._day = ""

    async def current(self, budget: Budget) -> float:
        """Spend so far in the budget's period."""
        slot = (budget.scope, budget.owner, current_label(budget.period))
        entry = self._spend.get(slot)
        if entry is not None and time.monotonic() < entry.fresh_until:
            return entry.usd
        return await self._read(slot, entry)

    async def _read(self, slot: tuple[str, str, str], entry: _Spend | None) -> float:
        if entry is None:
            day = current_label("day")
            if day != self._day:  # a new day: periods that ended are never asked again
                live = {current_label(period) for period in ("day", "week", "month", "total")}
                self._spend = {s: e for s, e in self._spend.items() if s[2] in live}
                self._day = day
            entry = self._spend[slot] = _Spend()
        started = time.monotonic()
        loaded_before = entry.fresh_until > 0.0
        if loaded_before:
            # Calls that arrive while this read runs use the value it replaces, not a read each.
            entry.fresh_until = started + self._max_age
        mark = entry.added
        try:
            committed = await self._load(slot[0], slot[1], since_label(slot[2]))
        except Exception as exc:
            if not loaded_before:
                raise  # nothing to answer with
            log.warning("re-reading the spend of %s %s failed, keeping the last value read: %s", slot[0], slot[1], exc)
            return entry.usd
        # The read holds every commit before it began; add ours that came after. A commit of ours
        # that raced the read may count twice, until the next read (never less than committed).
        entry.usd = committed + (entry.added - mark)
        entry.fresh_until = max(entry.fresh_until, started + self._max_age)
        return entry.usd

    async def add(self, amounts: Amounts) -> None:
        """Add this process's committed costs to the periods it has seen (others are read when first asked)."""
        for (scope, owner, day), cost in amounts.items():
            for period_label in day_labels(day):
                entry = self._spend.get((scope, owner, period_label))
                if entry is not None:
                    entry.usd += cost
                    entry.added += cost

    async def close(self) -> None:
        """Nothing to release."""

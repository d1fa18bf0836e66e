"""The two limit interfaces and the gate that applies them in corridor order."""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from typing import Awaitable, Callable, Protocol

from inferd.errors import BudgetExceeded, RateLimited
from inferd.store.keys import KeyRecord

WINDOW_SECONDS = 60.0

SpendLoader = Callable[[str, str], Awaitable[float]]  # (key id, YYYY-MM) -> spend from the database


class _MonthClock:
    """The current UTC month as YYYY-MM, recomputed only when a month boundary passes
    (every metered request asks, and formatting dates is not free)."""

    def __init__(self) -> None:
        self._label = ""
        self._until = 0.0

    def __call__(self) -> str:
        now = time.time()
        if now >= self._until:
            today = datetime.fromtimestamp(now, timezone.utc)
            self._label = f"{today.year:04d}-{today.month:02d}"
            first_of_next = datetime(today.year + today.month // 12, today.month % 12 + 1, 1, tzinfo=timezone.utc)
            self._until = first_of_next.timestamp()
        return self._label


current_month = _MonthClock()
current_month.__doc__ = "The budget period: the UTC calendar month, as YYYY-MM."


def window_wait(held: int, units: int, limit: int, nth_oldest: Callable[[int], float], now: float,
                window: float) -> int | None:
    """The sliding window's verdict: None when `units` more requests fit beside the `held` ones of
    the last `window` seconds, else whole seconds until enough of them leave it (`nth_oldest(i)`:
    the time of the i-th oldest held request, asked only then)."""
    excess = held + units - limit
    if excess <= 0:
        return None
    if excess > held:  # more units than the limit: never admitted
        return math.ceil(window)
    return max(1, math.ceil(nth_oldest(excess - 1) + window - now))


class RateLimiter(Protocol):
    """A sliding-window counter of requests per window id (a key's `rate_window`)."""

    async def hit(self, key: str, limit: int, units: int = 1) -> int | None:
        """Count `units` requests; None when admitted, else whole seconds until enough slots free."""

    async def close(self) -> None:
        """Release connections."""


class SpendCounter(Protocol):
    """This month's spend per charged key."""

    async def current(self, key: str) -> float:
        """Spend so far this month (USD)."""

    async def add(self, amounts: dict[tuple[str, str], float]) -> None:
        """Add committed costs, keyed by (key id, month)."""

    async def close(self) -> None:
        """Release connections."""


class Limits:
    """Requests per minute first (429), then the monthly budget on metered calls (402)."""

    def __init__(self, rate: RateLimiter, spend: SpendCounter) -> None:
        self.rate = rate
        self.spend = spend

    async def admit(self, key: KeyRecord, metered: bool, units: int = 1) -> None:
        """Raise RateLimited or BudgetExceeded, or return when the call may go on. A call that
        counts as several requests (an image request's `n`) takes `units` slots of the window
        (the key's `rate_window`: all user keys of one user from one parent share one)."""
        if key.rpm is not None:
            retry_after = await self.rate.hit(key.rate_window, key.rpm, units)
            if retry_after is not None:
                raise RateLimited(retry_after)
        if metered and key.budget_usd is not None:
            if await self.spend.current(key.charged_key_id) >= key.budget_usd:
                raise BudgetExceeded(f"Monthly budget of {key.budget_usd} USD reached for key {key.charged_key_id}")

    async def close(self) -> None:
        """Release connections."""
        await self.rate.close()
        await self.spend.close()

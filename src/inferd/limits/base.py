"""The two limit interfaces (windows, spend) and the gate that applies them in corridor order."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol, Sequence

from inferd.auth.key_record import KeyRecord
from inferd.errors import BudgetExceeded, RateLimited
from inferd.observe.requests import current
from inferd.store.key_limits import Budget, Window
from inferd.store.usage_write import Amounts

WINDOW_SECONDS = 60.0

SpendLoader = Callable[[str, str, "str | None"], Awaitable[float]]  # (scope, owner, since day) -> USD


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


@dataclass(frozen=True)
class RateState:
    """The tightest window a call counted in, for OpenAI's `x-ratelimit-*` headers: per kind, the
    limit, what is left of it and seconds until the oldest counted call leaves the window (None
    where no window of that kind applies)."""

    requests: tuple[int, int, float] | None
    tokens: tuple[int, int, float] | None

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The response headers."""
        out = []
        for kind, state in (("requests", self.requests), ("tokens", self.tokens)):
            if state is not None:
                limit, remaining, reset = state
                out += [(b"x-ratelimit-limit-" + kind.encode(), str(limit).encode()),
                        (b"x-ratelimit-remaining-" + kind.encode(), str(max(0, remaining)).encode()),
                        (b"x-ratelimit-reset-" + kind.encode(), duration(reset).encode())]
        return out


def duration(seconds: float) -> str:
    """OpenAI's form of a reset time: `0s`, `17s`, `6m0s`, `1h2m3s` (whole seconds, rounded up)."""
    whole = max(0, math.ceil(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def tokens_wait(held: "Sequence[tuple[float, int]]", total: int, limit: int, now: float, window: float) -> int | None:
    """A token window's verdict: None when the `total` tokens of the last `window` seconds (`held`:
    (time, tokens), oldest first) are under `limit`, else whole seconds until enough leave it."""
    if total < limit:
        return None
    for at, tokens in held:
        total -= tokens
        if total < limit:
            return max(1, math.ceil(at + window - now))
    return math.ceil(window)


def tightest(states: list[tuple[int, int, float]]) -> tuple[int, int, float] | None:
    """The state with the least left (the window a client must pace itself by)."""
    if len(states) < 2:
        return states[0] if states else None
    return min(states, key=lambda state: state[1])


class RateLimiter(Protocol):
    """Sliding windows of requests and tokens per minute, by window id."""

    async def admit(self, windows: Sequence[Window], units: int = 1) -> tuple[int | None, RateState]:
        """Check every window's rpm and tpm and count `units` requests in all of them, or in none:
        (None, state) when admitted, else (whole seconds until all would admit, state)."""

    async def count_tokens(self, windows: Sequence[Window], tokens: int) -> None:
        """Add a finished call's tokens to the windows with a tpm."""

    async def remaining(self, windows: Sequence[Window]) -> list[tuple[int | None, int | None]]:
        """What is left of each window (requests, tokens; None where it sets no such limit), counting nothing."""

    async def close(self) -> None:
        """Release connections."""


class SpendCounter(Protocol):
    """The spend of each budget's owner in the period under way."""

    async def current(self, budget: Budget) -> float:
        """Spend so far in the budget's period (USD)."""

    async def add(self, amounts: Amounts) -> None:
        """Add committed costs, keyed by (scope, owner, day)."""

    async def close(self) -> None:
        """Release connections."""


def budget_message(budget: Budget) -> str:
    """What a 402 says: which budget, of whom, over which period."""
    period = {"day": "Daily", "week": "Weekly", "month": "Monthly", "total": "Total"}[budget.period]
    return f"{period} budget of {budget.usd} USD reached for {budget.scope} {budget.name}"


class Limits:
    """The windows first (429), then the budgets on metered calls (402)."""

    def __init__(self, rate: RateLimiter, spend: SpendCounter) -> None:
        self.rate = rate
        self.spend = spend

    async def admit(self, key: KeyRecord, metered: bool, units: int = 1) -> None:
        """Raise RateLimited or BudgetExceeded, or return when the call may go on. A call that
        counts as several requests (an image request's `n`) takes `units` slots of each window
        (the key's `rate_window`: all user keys of one user from one parent share one). The
        windows' state goes on the request's note, for the `x-ratelimit-*` headers."""
        if key.windows:
            wait, state = await self.rate.admit(key.windows, units)
            note = current.get()
            if note is not None:
                note.rate = state
            if wait is not None:
                raise RateLimited(wait)
        if metered:
            for budget in key.budgets:
                if await self.spend.current(budget) >= budget.usd:
                    raise BudgetExceeded(budget_message(budget))

    @staticmethod
    def model_windows(key: KeyRecord, model: str, rpm: int | None = None, tpm: int | None = None
                      ) -> list[Window]:
        """The windows of one model a call of `key` counts in: the key's and its team's for that
        model (`--model-limit`), and the model's own over all callers (`[[models]] rpm`, `tpm`)."""
        windows = [window for window in key.model_windows if window.model == model]
        if rpm is not None or tpm is not None:
            windows.append(Window("model", "model:" + model, rpm, tpm, model))
        return windows

    async def admit_model(self, key: KeyRecord, model: str, rpm: int | None = None, tpm: int | None = None,
                          units: int = 1) -> None:
        """The per-model windows, once the model is known (after `admit`, which checked the key's
        and team's): 429 when one is full. The headers keep the tightest of all."""
        if not key.model_windows and rpm is None and tpm is None:
            return
        windows = self.model_windows(key, model, rpm, tpm)
        if not windows:
            return
        wait, state = await self.rate.admit(windows, units)
        note = current.get()
        if note is not None:
            before = note.rate
            note.rate = state if before is None else RateState(
                tightest([s for s in (before.requests, state.requests) if s is not None]),
                tightest([s for s in (before.tokens, state.tokens) if s is not None]))
        if wait is not None:
            raise RateLimited(wait)

    async def count_tokens(self, key: KeyRecord, tokens: int, model: str | None = None,
                           rpm: int | None = None, tpm: int | None = None) -> None:
        """A call of `key` to `model` used `tokens` (prompt and completion): they count in every
        window with a tpm it was admitted in (the model's own when its `tpm` is given)."""
        if tokens <= 0:
            return
        windows: Sequence[Window] = key.token_windows
        if model is not None and (key.model_windows or tpm is not None):
            windows = [*windows, *(window for window in self.model_windows(key, model, rpm, tpm)
                                   if window.tpm is not None)]
        if windows:
            await self.rate.count_tokens(windows, tokens)

    async def remaining(self, key: KeyRecord) -> list[tuple[Window, int | None, int | None]]:
        """Each window of the key (its own, its team's, per model): what is left of its requests and
        tokens (None where it sets no such limit), counting nothing (`GET /v1/me`)."""
        windows = [*key.windows, *key.model_windows]
        if not windows:
            return []
        left = await self.rate.remaining(windows)
        return [(window, requests, tokens) for window, (requests, tokens) in zip(windows, left)]

    async def close(self) -> None:
        """Release connections."""
        await self.rate.close()
        await self.spend.close()

"""Limits shared by every replica through Redis (atomic Lua scripts, server time), over the lean
client of limits/resp.py."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from inferd.errors import BudgetExceeded, RateLimited
from inferd.limits.base import WINDOW_SECONDS, Limits, SpendLoader, current_month
from inferd.limits.resp import Client, Script
from inferd.store.keys import KeyRecord

# Add to spend counters that exist; a missing counter is loaded from the database on next read.
_ADD_SCRIPT = """
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    redis.call('INCRBYFLOAT', key, ARGV[i])
  end
end
return 0
"""

# Both checks of the corridor in one round trip: the sliding window over a sorted set of
# admitted requests (when ARGV[2] > 0), scored by Redis's own clock in microseconds so replicas
# with skewed clocks share one window; then this month's spend (when KEYS[2] is not empty).
# Returns {wait_us or -1, spend or false}.
_ADMIT_SCRIPT = """
local limit = tonumber(ARGV[2])
if limit > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local window = tonumber(ARGV[1])
  local units = tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  local n = redis.call('ZCARD', KEYS[1])
  local excess = n + units - limit
  if excess > 0 then
    if excess > n then
      return {window, false}
    end
    local oldest = redis.call('ZRANGE', KEYS[1], excess - 1, excess - 1, 'WITHSCORES')
    return {tonumber(oldest[2]) + window - now, false}
  end
  for i = 1, units do
    redis.call('ZADD', KEYS[1], now, ARGV[3] .. ':' .. i)
  end
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
end
if KEYS[2] ~= '' then
  return {-1, redis.call('GET', KEYS[2])}
end
return {-1, false}
"""

_SPEND_TTL_SECONDS = 40 * 86400


class RedisRateLimiter:
    """Sliding-window requests per minute, exact across replicas."""

    def __init__(self, redis: Client, prefix: str, window: float = WINDOW_SECONDS) -> None:
        self._redis = redis
        self._prefix = prefix + "rpm:"
        self._window_us = int(window * 1_000_000)
        self._script = Script(redis, _ADMIT_SCRIPT)

    async def hit(self, key: str, limit: int, units: int = 1) -> int | None:
        """Count `units` requests; None when admitted, else seconds until enough slots free."""
        wait_us, _ = await self._script([self._prefix + key, ""], [self._window_us, limit, os.urandom(8).hex(), units])
        return None if int(wait_us) < 0 else max(1, -(-int(wait_us) // 1_000_000))

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.close()


class RedisSpendCounter:
    """Monthly spend per key as a Redis float, seeded from the database when missing."""

    def __init__(self, redis: Client, prefix: str, loader: SpendLoader) -> None:
        self._redis = redis
        self._prefix = prefix + "spend:"
        self._load = loader

    def key_name(self, key: str, month: str) -> str:
        """The Redis key holding one key's spend for one month."""
        return f"{self._prefix}{key}:{month}"

    async def current(self, key: str) -> float:
        """Spend so far this month."""
        month = current_month()
        name = self.key_name(key, month)
        value = await self._redis.execute("GET", name)
        if value is None:
            loaded = await self._load(key, month)
            await self._redis.execute("SET", name, repr(loaded), "NX", "EX", _SPEND_TTL_SECONDS)
            value = await self._redis.execute("GET", name)
        return float(value)

    async def add(self, amounts: dict[tuple[str, str], float]) -> None:
        """Add committed costs to every replica's view.

        Written without waiting for a reply: it is on every metered call's path, between the
        usage commit and the reply. It is in Redis's socket before the reply leaves for the
        client, so this replica's next admission runs after it (one connection, in order), and so
        does, short of Redis stalling for the client's whole round trip, one on another replica.
        EVAL with the script's text (not EVALSHA): an unanswered command cannot learn that Redis
        lost a loaded script."""
        if not amounts:
            return
        names = [self.key_name(key, month) for key, month in amounts]
        await self._redis.send_unanswered(("EVAL", _ADD_SCRIPT, len(names), *names,
                                           *[repr(cost) for cost in amounts.values()]))

    async def close(self) -> None:
        """Nothing beyond the shared client (closed by the rate limiter)."""


class _Admissions:
    """The admission checks (`_ADMIT_SCRIPT`) of concurrent requests, sent to Redis together.

    While one round trip is under way, the checks of requests that arrive queue up, and go as one
    pipeline when it returns (then the next batch, and so on): one write and one read for a
    whole batch instead of one each per request. A lone request (concurrency 1) is sent at once,
    as before. Each check stays one atomic script run in Redis, so limits are exactly as strict
    as one call per request; only the trips are shared."""

    def __init__(self, redis: Client) -> None:
        self._script = Script(redis, _ADMIT_SCRIPT)
        self._queue: list[tuple[list[str], list[Any], asyncio.Future[Any]]] = []
        self._busy = False
        self._drainer: asyncio.Task[None] | None = None  # kept: the loop holds tasks only weakly

    async def check(self, keys: list[str], args: list[Any]) -> Any:
        """The script's reply for one request."""
        if self._busy:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._queue.append((keys, args, future))
            return await future
        self._busy = True
        try:
            return await self._script(keys, args)
        finally:
            self._next()

    def _next(self) -> None:
        if self._queue:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        else:
            self._busy = False

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    replies = await self._script.many([(keys, args) for keys, args, _ in batch])
                except Exception as exc:  # Redis down: every check of the batch fails as a lone one would
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, _, future), reply in zip(batch, replies):
                    if future.done():
                        continue
                    if isinstance(reply, Exception):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        finally:
            self._busy = False


class RedisLimits(Limits):
    """The corridor's two checks against Redis in one round trip per request."""

    def __init__(self, redis: Client, prefix: str, loader: SpendLoader, window: float = WINDOW_SECONDS) -> None:
        self._spend = RedisSpendCounter(redis, prefix, loader)
        super().__init__(RedisRateLimiter(redis, prefix, window), self._spend)
        self._rate_prefix = prefix + "rpm:"
        self._window_us = int(window * 1_000_000)
        self._admissions = _Admissions(redis)

    async def admit(self, key: KeyRecord, metered: bool, units: int = 1) -> None:
        """429 over the per-minute limit, else 402 when this month's spend reached the budget."""
        budgeted = metered and key.budget_usd is not None
        if key.rpm is None and not budgeted:
            return
        spend_key = self._spend.key_name(key.charged_key_id, current_month()) if budgeted else ""
        wait_us, spend = await self._admissions.check(
            [self._rate_prefix + key.rate_window, spend_key],
            [self._window_us, key.rpm or 0, os.urandom(8).hex(), units])
        if int(wait_us) >= 0:
            raise RateLimited(max(1, -(-int(wait_us) // 1_000_000)))
        if budgeted:
            current = float(spend) if spend is not None else await self._spend.current(key.charged_key_id)
            if current >= key.budget_usd:  # type: ignore[operator]
                raise BudgetExceeded(f"Monthly budget of {key.budget_usd} USD reached for key {key.charged_key_id}")

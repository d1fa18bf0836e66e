"""Limits shared by every replica through Redis (atomic Lua scripts, server time)."""

from __future__ import annotations

import os

from redis.asyncio import Redis

from inferd.limits.base import WINDOW_SECONDS, SpendLoader, current_month

# Sliding window over a sorted set of admitted requests, scored by Redis's own clock in
# microseconds so replicas with skewed clocks still share one window.
_RATE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], n - limit, n - limit, 'WITHSCORES')
  return tonumber(oldest[2]) + window - now
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
return -1
"""

# Add to spend counters that exist; a missing counter is loaded from the database on next read.
_ADD_SCRIPT = """
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    redis.call('INCRBYFLOAT', key, ARGV[i])
  end
end
return 0
"""

_SPEND_TTL_SECONDS = 40 * 86400


class RedisRateLimiter:
    """Sliding-window requests per minute, exact across replicas."""

    def __init__(self, redis: Redis, prefix: str, window: float = WINDOW_SECONDS) -> None:
        self._redis = redis
        self._prefix = prefix + "rpm:"
        self._window_us = int(window * 1_000_000)
        self._script = redis.register_script(_RATE_SCRIPT)

    async def hit(self, key: str, limit: int) -> int | None:
        """Count one request; None when admitted, else seconds until a slot frees."""
        member = os.urandom(8).hex()
        wait_us = await self._script(keys=[self._prefix + key], args=[self._window_us, limit, member])
        wait_us = int(wait_us)
        if wait_us < 0:
            return None
        return max(1, -(-wait_us // 1_000_000))

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()


class RedisSpendCounter:
    """Monthly spend per key as a Redis float, seeded from the database when missing."""

    def __init__(self, redis: Redis, prefix: str, loader: SpendLoader) -> None:
        self._redis = redis
        self._prefix = prefix + "spend:"
        self._load = loader
        self._add = redis.register_script(_ADD_SCRIPT)

    def _key(self, key: str, month: str) -> str:
        return f"{self._prefix}{key}:{month}"

    async def current(self, key: str) -> float:
        """Spend so far this month."""
        month = current_month()
        name = self._key(key, month)
        value = await self._redis.get(name)
        if value is None:
            loaded = await self._load(key, month)
            await self._redis.set(name, repr(loaded), nx=True, ex=_SPEND_TTL_SECONDS)
            value = await self._redis.get(name)
        return float(value)

    async def add(self, amounts: dict[tuple[str, str], float]) -> None:
        """Add committed costs to every replica's view."""
        if not amounts:
            return
        names = [self._key(key, month) for key, month in amounts]
        await self._add(keys=names, args=[repr(cost) for cost in amounts.values()])

    async def close(self) -> None:
        """Nothing beyond the shared client (closed by the rate limiter)."""

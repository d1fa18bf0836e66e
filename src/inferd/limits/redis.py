"""Limits shared by every replica through Redis (atomic Lua scripts, server time), over the lean
client of limits/resp.py."""

from __future__ import annotations

import asyncio
import itertools
import os
from datetime import date
from typing import Any, Sequence

from inferd.auth.key_record import KeyRecord
from inferd.errors import BudgetExceeded, RateLimited

from inferd.limits.base import WINDOW_SECONDS, Limits, RateState, SpendLoader, budget_message
from inferd.limits.periods import current_label, day_labels, since_label, today
from inferd.limits.resp import Client, Encoded, Script
from inferd.observe.requests import current
from inferd.store.key_limits import Budget, Window
from inferd.store.usage_write import Amounts

# Add to spend counters that exist; a missing counter is loaded from the database on next read.
# KEYS: the counters of each (scope, owner, day), four each (the day's period labels); ARGV: one
# cost per four counters.
_ADD_SCRIPT = """
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    redis.call('INCRBYFLOAT', key, ARGV[math.floor((i - 1) / 4) + 1])
  end
end
return 0
"""

# The first lines of the admission and of the remaining count: the arguments both read and Redis's
# clock (microseconds, and the second the token hashes' fields are named by).
_WINDOWS_NOW = """
local window = tonumber(ARGV[1])
local n = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local second = tonumber(t[1])
local window_s = math.floor(window / 1000000)
"""

# Every check of the corridor in one round trip. ARGV: window (us), a unique member, units, n, then
# rpm and tpm of each of the n windows (0: none). KEYS: each window's request set (sorted by Redis's
# own clock in microseconds, so replicas with skewed clocks share one window) and token hash (one
# field per second of Redis's clock), then the spend counters of the call's budgets.
# Every window is checked before any counts the call: a call one window refuses takes no slot of
# another. Returns {wait_us or -1, requests limit, left, reset_us, tokens limit, left, reset_us,
# spend...} for the tightest window of each kind (limit 0: none).
_ADMIT_SCRIPT = _WINDOWS_NOW + """local units = tonumber(ARGV[3])
-- A token hash holds one field per second of Redis's clock with that second's tokens, plus `sum`
-- (of the fields still in the window) and `low` (the oldest field's second, when any): seconds
-- that left the window since the last check are taken off `sum` one by one (usually none or one),
-- not by reading every field. A hash without them (new, or written before they existed), or one
-- unchecked for long, is counted once in full.
local function tally(key)
  local state = redis.call('HMGET', key, 'sum', 'low')
  local total = tonumber(state[1])
  local low = tonumber(state[2])
  local cutoff = second - window_s
  if total == nil or low == nil or cutoff - low > 2 * window_s then
    total = 0
    local fields = redis.call('HGETALL', key)
    for j = 1, #fields, 2 do
      local s = tonumber(fields[j])
      if s ~= nil then
        if s <= cutoff then
          redis.call('HDEL', key, fields[j])
        else
          total = total + tonumber(fields[j + 1])
        end
      end
    end
  else
    for s = low, cutoff do
      local amount = redis.call('HGET', key, s)
      if amount then
        total = total - tonumber(amount)
        redis.call('HDEL', key, s)
      end
    end
  end
  if total < 0 then total = 0 end
  if low == nil or low <= cutoff then low = cutoff + 1 end
  if total > 0 then  -- `low` moves on to the oldest field (each second is passed over once)
    while low < second and redis.call('HEXISTS', key, low) == 0 do low = low + 1 end
  end
  redis.call('HSET', key, 'sum', total, 'low', low)
  redis.call('EXPIRE', key, window_s + 2)
  return total, low
end
local wait = -1
local held = {}
local tok = {0, 0, 0}
for i = 1, n do
  local rpm = tonumber(ARGV[3 + 2 * i])
  local tpm = tonumber(ARGV[4 + 2 * i])
  if rpm > 0 then
    local key = KEYS[2 * i - 1]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    local count = redis.call('ZCARD', key)
    held[i] = count
    local excess = count + units - rpm
    if excess > 0 then
      local w = window
      if excess <= count then
        local oldest = redis.call('ZRANGE', key, excess - 1, excess - 1, 'WITHSCORES')
        w = tonumber(oldest[2]) + window - now
      end
      if w > wait then wait = w end
    end
  end
  if tpm > 0 then
    local key = KEYS[2 * i]
    local total, low = tally(key)
    local reset = 0
    if total > 0 then reset = (low + window_s) * 1000000 - now end
    if total >= tpm then
      local left = total
      local w = window
      for s = low, second do
        local amount = tonumber(redis.call('HGET', key, s) or 0)
        left = left - amount
        if amount > 0 and left < tpm then
          w = (s + window_s) * 1000000 - now
          break
        end
      end
      if w > wait then wait = w end
    end
    if tok[1] == 0 or tpm - total < tok[2] then tok = {tpm, tpm - total, reset} end
  end
end
local req = {0, 0, 0}
for i = 1, n do
  local rpm = tonumber(ARGV[3 + 2 * i])
  if rpm > 0 then
    local key = KEYS[2 * i - 1]
    local count = held[i]
    if wait < 0 then
      for u = 1, units do
        redis.call('ZADD', key, now, ARGV[2] .. ':' .. u)
      end
      redis.call('PEXPIRE', key, math.ceil(window / 1000))
      count = count + units
    end
    if req[1] == 0 or rpm - count < req[2] then
      local reset = 0
      local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      if oldest[2] then reset = tonumber(oldest[2]) + window - now end
      req = {rpm, rpm - count, reset}
    end
  end
end
local reply = {wait, req[1], req[2], req[3], tok[1], tok[2], tok[3]}
for i = 2 * n + 1, #KEYS do
  reply[#reply + 1] = redis.call('GET', KEYS[i])
end
return reply
"""

# What is left of each window, counting nothing. KEYS and ARGV as the admission's; returns
# {requests left or -1, tokens left or -1} per window.
_REMAINING_SCRIPT = _WINDOWS_NOW + """local reply = {}
for i = 1, n do
  local rpm = tonumber(ARGV[3 + 2 * i])
  local tpm = tonumber(ARGV[4 + 2 * i])
  local requests = -1
  local tokens = -1
  if rpm > 0 then
    requests = math.max(0, rpm - redis.call('ZCOUNT', KEYS[2 * i - 1], '(' .. (now - window), '+inf'))
  end
  if tpm > 0 then
    local fields = redis.call('HGETALL', KEYS[2 * i])
    local total = 0
    for j = 1, #fields, 2 do
      local s = tonumber(fields[j])  -- `sum` and `low` are not seconds
      if s ~= nil and s > second - window_s then total = total + tonumber(fields[j + 1]) end
    end
    tokens = math.max(0, tpm - total)
  end
  reply[#reply + 1] = requests
  reply[#reply + 1] = tokens
end
return reply
"""

# A finished call's tokens, in the current second's field of each window's hash (Redis's clock),
# and in its `sum` once an admission keeps one (never before `low`: a clock stepped back must not
# leave a field the admission never takes off).
_TOKENS_SCRIPT = """
local second = tonumber(redis.call('TIME')[1])
for _, key in ipairs(KEYS) do
  local low = tonumber(redis.call('HGET', key, 'low'))
  if low ~= nil then
    redis.call('HINCRBY', key, math.max(second, low), ARGV[1])
    redis.call('HINCRBY', key, 'sum', ARGV[1])
  else
    redis.call('HINCRBY', key, second, ARGV[1])
  end
  redis.call('EXPIRE', key, ARGV[2])
end
return 0
"""

_ADD_TEXT = Encoded.of(_ADD_SCRIPT)  # sent with every unanswered EVAL: framed once
_TOKENS_TEXT = Encoded.of(_TOKENS_SCRIPT)

_TTL_OF_PERIOD = {"D": 3 * 86400, "W": 9 * 86400, "M": 40 * 86400, "T": 40 * 86400}


class _Members:
    """Names for the calls counted in a request set, unique across processes and replicas: a random
    prefix per process (drawn again in a forked worker) and a counter (no system call per call)."""

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        """A new prefix and counter (this process is new)."""
        self._prefix = os.urandom(8).hex() + "."
        self._count = itertools.count()

    def next(self) -> str:
        """A name no other call has."""
        return self._prefix + str(next(self._count))


_members = _Members()
_NAMES_KEPT = 4096  # entries at most: a record renewed (every minute) makes a new one, so past it all go


def _seconds(us: Any) -> int:
    return max(1, -(-int(us) // 1_000_000))


def _state(reply: list[Any]) -> RateState:
    requests = (int(reply[1]), int(reply[2]), int(reply[3]) / 1e6) if int(reply[1]) else None
    tokens = (int(reply[4]), int(reply[5]), int(reply[6]) / 1e6) if int(reply[4]) else None
    return RateState(requests, tokens)


class RedisRateLimiter:
    """Sliding windows of requests and tokens per minute, exact across replicas."""

    def __init__(self, redis: Client, prefix: str, window: float = WINDOW_SECONDS) -> None:
        self._redis = redis
        self._prefix = prefix
        self._window_us = int(window * 1_000_000)
        self._window_s = max(1, int(window))
        self._script = Script(redis, _ADMIT_SCRIPT)
        self._remaining = Script(redis, _REMAINING_SCRIPT)
        self._token_names: dict[str, Encoded] = {}

    def names(self, windows: Sequence[Window]) -> list[Encoded]:
        """Each window's request set and token hash."""
        prefix = self._prefix
        names = []
        for window in windows:
            names += (Encoded.of(prefix + "rpm:" + window.name), Encoded.of(prefix + "tpm:" + window.name))
        return names

    def token_names(self, windows: Sequence[Window]) -> list[Encoded]:
        """The token hashes of windows, framed once per window id."""
        known = self._token_names
        names = []
        for window in windows:
            name = known.get(window.name)
            if name is None:
                if len(known) >= _NAMES_KEPT:
                    known.clear()
                name = known[window.name] = Encoded.of(self._prefix + "tpm:" + window.name)
            names.append(name)
        return names

    @staticmethod
    def arguments(windows: Sequence[Window], window_us: int, units: int) -> list[Any]:
        """The admission script's arguments."""
        args: list[Any] = [window_us, _members.next(), units, len(windows)]
        for window in windows:
            args += (window.rpm or 0, window.tpm or 0)
        return args

    async def hit(self, key: str, limit: int, units: int = 1) -> int | None:
        """Count `units` requests in one requests window; None when admitted, else seconds until enough free."""
        wait, _ = await self.admit([Window("key", key, limit, None)], units)
        return wait

    async def admit(self, windows: Sequence[Window], units: int = 1) -> tuple[int | None, RateState]:
        """Check every window and count the call in all of them, or in none."""
        reply = await self._script(self.names(windows), self.arguments(windows, self._window_us, units))
        return (None if int(reply[0]) < 0 else _seconds(reply[0])), _state(reply)

    async def remaining(self, windows: Sequence[Window]) -> list[tuple[int | None, int | None]]:
        """What is left of each window, counting nothing."""
        reply = await self._remaining(self.names(windows), self.arguments(windows, self._window_us, 0))
        return [(None if int(reply[2 * i]) < 0 else int(reply[2 * i]),
                 None if int(reply[2 * i + 1]) < 0 else int(reply[2 * i + 1])) for i in range(len(windows))]

    async def count_tokens(self, windows: Sequence[Window], tokens: int) -> None:
        """Add a finished call's tokens, without waiting for the reply (as spend is added), in the
        same write as the call's spend when it has one (the stage counts tokens first)."""
        names = self.token_names(windows)
        await self._redis.send_unanswered(("EVAL", _TOKENS_TEXT, len(names), *names, tokens, self._window_s + 2),
                                          soon=True)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.close()


class RedisSpendCounter:
    """Spend per owner and period as Redis floats, seeded from the database when missing."""

    def __init__(self, redis: Client, prefix: str, loader: SpendLoader) -> None:
        self._redis = redis
        self._prefix = prefix + "spend:"
        self._load = loader
        self._names: dict[tuple[str, str, str], tuple[Encoded, ...]] = {}  # (scope, owner, day): its counters

    def key_name(self, scope: str, owner: str, period_label: str) -> str:
        """The Redis key holding one owner's spend in one period."""
        return f"{self._prefix}{scope}:{owner}:{period_label}"

    def name_of(self, budget: Budget) -> str:
        """The counter of a budget's period under way."""
        return self.key_name(budget.scope, budget.owner, current_label(budget.period))

    async def current(self, budget: Budget) -> float:
        """Spend so far in the budget's period."""
        name = self.name_of(budget)
        value = await self._redis.execute("GET", name)
        return float(value) if value is not None else await self.seed(budget, name)

    async def seed(self, budget: Budget, name: str) -> float:
        """Load a missing counter from the database (the first replica to set it wins)."""
        period_label = name.rsplit(":", 1)[1]
        loaded = await self._load(budget.scope, budget.owner, since_label(period_label))
        await self._redis.execute("SET", name, repr(loaded), "NX", "EX", _TTL_OF_PERIOD[period_label[0]])
        value = await self._redis.execute("GET", name)
        return float(value)

    async def add(self, amounts: Amounts) -> None:
        """Add committed costs to every replica's view.

        Written without waiting for a reply: it is on every metered call's path, between the
        usage commit and the reply. It is in Redis's socket before the reply leaves for the
        client, so this replica's next admission runs after it (one connection, in order), and so
        does, short of Redis stalling for the client's whole round trip, one on another replica.
        EVAL with the script's text (not EVALSHA): an unanswered command cannot learn that Redis
        lost a loaded script."""
        if not amounts:
            return
        names: list[Encoded] = []
        costs = []
        known = self._names
        for owner_day, cost in amounts.items():
            counters = known.get(owner_day)
            if counters is None:
                if len(known) >= _NAMES_KEPT:
                    known.clear()
                scope, owner, day = owner_day
                counters = known[owner_day] = tuple(Encoded.of(self.key_name(scope, owner, period_label))
                                                    for period_label in day_labels(day))
            names += counters
            costs.append(repr(cost))
        await self._redis.send_unanswered(("EVAL", _ADD_TEXT, len(names), *names, *costs))

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
    """The corridor's checks against Redis in one round trip per request."""

    def __init__(self, redis: Client, prefix: str, loader: SpendLoader, window: float = WINDOW_SECONDS) -> None:
        self._spend = RedisSpendCounter(redis, prefix, loader)
        self._rate = RedisRateLimiter(redis, prefix, window)
        super().__init__(self._rate, self._spend)
        self._window_us = int(window * 1_000_000)
        self._admissions = _Admissions(redis)
        # The Redis names of a key record's windows and budgets, by the identity of its tuples (key
        # records are cached, so the same tuples come back call after call): building them is a
        # string join per window and per budget. Entries hold their tuples, so an id is not reused
        # while its entry lives; the day is checked because spend counters are named by period.
        self._names: dict[tuple[int, int], tuple[tuple[Window, ...], tuple[Budget, ...], date, list[Encoded],
                                                 list[str], list[Encoded]]] = {}
        self._window_arg = Encoded.of(str(self._window_us))

    def _names_of(self, windows: tuple[Window, ...], budgets: tuple[Budget, ...]
                  ) -> tuple[list[Encoded], list[str], list[Encoded]]:
        """The script's keys (framed), the spend counters' names and the script's arguments after
        the call's own (the windows' count and limits, framed) of a key record's tuples."""
        day = today()
        entry = self._names.get((id(windows), id(budgets)))
        if entry is not None and entry[0] is windows and entry[1] is budgets and entry[2] == day:
            return entry[3], entry[4], entry[5]
        spend_names = [self._spend.name_of(budget) for budget in budgets]
        names = [*self._rate.names(windows), *map(Encoded.of, spend_names)]
        limits = [Encoded.of(str(len(windows)))]
        for window in windows:
            limits += (Encoded.of(str(window.rpm or 0)), Encoded.of(str(window.tpm or 0)))
        if len(self._names) >= _NAMES_KEPT:
            self._names.clear()
        self._names[(id(windows), id(budgets))] = (windows, budgets, day, names, spend_names, limits)
        return names, spend_names, limits

    async def admit(self, key: KeyRecord, metered: bool, units: int = 1) -> None:
        """429 over a window's limit, else 402 when a budget's period is spent."""
        budgets = key.budgets if metered else ()
        windows = key.windows
        if not windows and not budgets:
            return
        names, spend_names, limits = self._names_of(windows, budgets)
        # As RedisRateLimiter.arguments, from the parts framed once.
        reply = await self._admissions.check(names, [self._window_arg, _members.next(), units, *limits])
        if windows:
            note = current.get()
            if note is not None:
                note.rate = _state(reply)
            if int(reply[0]) >= 0:
                raise RateLimited(_seconds(reply[0]))
        for budget, name, spend in zip(budgets, spend_names, reply[7:]):
            spent = float(spend) if spend is not None else await self._spend.seed(budget, name)
            if spent >= budget.usd:
                raise BudgetExceeded(budget_message(budget))

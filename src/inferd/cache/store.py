"""Where the response cache keeps its entries: the database (`cache_entries`, SQLite or
PostgreSQL), or Redis when the deployment has one, so every replica answers from the same entries.

Both keep at most `max_entries` (the oldest leave first) and never serve an entry older than the
ttl. An entry is the answer as first sent (JSON) with the tokens and cost first billed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta, timezone
from typing import Any, Protocol

import orjson
from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.limits.resp import Client
from inferd.store.db import utcnow
from inferd.store.tables import cache_entries


@dataclass(slots=True)
class Entry:
    """One stored answer and what it first cost."""

    reply: dict[str, Any]
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    created_at: float = 0.0  # seconds since the epoch, on the clock of stored timestamps

    def age(self) -> int:
        """Whole seconds since the entry was stored (the `age` header)."""
        return max(0, int(_now() - self.created_at))


def _now() -> float:
    return utcnow().replace(tzinfo=timezone.utc).timestamp()


def _prune_every(max_entries: int) -> int:
    """Puts between two prunes: every put for a small bound, else about one in a thousandth of it
    (the store may hold that many more entries between two prunes, never more)."""
    return max(1, max_entries // 1000)


class CacheStore(Protocol):
    """The entries, by cache key."""

    async def get(self, key: str, max_age: int) -> Entry | None:
        """The entry under `key` stored at most `max_age` seconds ago, or None."""

    async def put(self, key: str, org: str, model: str, entry: Entry) -> None:
        """Store (or replace) the entry under `key`, for `org`; the oldest leave beyond the bound."""

    async def clear(self, org: str) -> int:
        """Remove every entry of `org`; how many there were."""

    async def close(self) -> None:
        """Release connections."""


class SqlCacheStore:
    """Entries in the `cache_entries` table."""

    def __init__(self, engine: AsyncEngine, ttl_s: int, max_entries: int) -> None:
        self._engine = engine
        self._ttl = ttl_s
        self._max = max_entries
        self._every = _prune_every(max_entries)
        self._puts = 0
        self._insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert

    async def get(self, key: str, max_age: int) -> Entry | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(cache_entries).where(cache_entries.c.key == key))).mappings().first()
        if row is None:
            return None
        created = row["created_at"].replace(tzinfo=timezone.utc).timestamp()
        if _now() - created > min(max_age, self._ttl):
            return None
        return Entry(orjson.loads(row["reply"]), row["prompt_tokens"], row["cached_prompt_tokens"],
                     row["completion_tokens"], row["cost_usd"], created)

    async def put(self, key: str, org: str, model: str, entry: Entry) -> None:
        now = utcnow()
        values = {"key": key, "org": org, "model": model, "reply": orjson.dumps(entry.reply).decode(),
                  "prompt_tokens": entry.prompt_tokens, "cached_prompt_tokens": entry.cached_prompt_tokens,
                  "completion_tokens": entry.completion_tokens, "cost_usd": entry.cost_usd, "created_at": now}
        stmt = self._insert(cache_entries).values(values)
        stmt = stmt.on_conflict_do_update(index_elements=[cache_entries.c.key],
                                          set_={name: stmt.excluded[name] for name in values if name != "key"})
        self._puts += 1
        prune = self._puts % self._every == 0
        async with self._engine.begin() as conn:
            await conn.execute(stmt)
            if prune:
                # Expired entries first, then whatever is beyond the bound, oldest first.
                await conn.execute(delete(cache_entries).where(
                    cache_entries.c.created_at < now - timedelta(seconds=self._ttl)))
                beyond = (select(cache_entries.c.key).order_by(cache_entries.c.created_at.desc(),
                                                               cache_entries.c.key.desc())
                          .offset(self._max))
                await conn.execute(delete(cache_entries).where(cache_entries.c.key.in_(beyond)))

    async def clear(self, org: str) -> int:
        async with self._engine.begin() as conn:
            return int((await conn.execute(delete(cache_entries).where(cache_entries.c.org == org))).rowcount or 0)

    async def close(self) -> None:
        """Nothing of its own: the engine is the app's."""


class RedisCacheStore:
    """Entries in Redis: each under its own name with the ttl as its expiry, a sorted set of every
    entry by creation time (the bound, oldest out) and a set of each org's entries (`clear`)."""

    def __init__(self, client: Client, prefix: str, ttl_s: int, max_entries: int) -> None:
        self._client = client
        self._prefix = prefix + "cache:"
        self._index = self._prefix + "index"
        self._ttl = ttl_s
        self._max = max_entries

    async def get(self, key: str, max_age: int) -> Entry | None:
        data = await self._client.execute("GET", self._prefix + key)
        if data is None:
            return None
        stored = orjson.loads(data)
        created = float(stored["created_at"])
        if _now() - created > min(max_age, self._ttl):
            return None
        return Entry(stored["reply"], int(stored["prompt_tokens"]), int(stored["cached_prompt_tokens"]),
                     int(stored["completion_tokens"]), float(stored["cost_usd"]), created)

    async def put(self, key: str, org: str, model: str, entry: Entry) -> None:
        now = _now()
        data = orjson.dumps({"org": org, "model": model, "reply": entry.reply, "prompt_tokens": entry.prompt_tokens,
                             "cached_prompt_tokens": entry.cached_prompt_tokens,
                             "completion_tokens": entry.completion_tokens, "cost_usd": entry.cost_usd,
                             "created_at": now})
        name = self._prefix + key
        replies = await self._client.pipeline([
            ("SET", name, data, "EX", self._ttl),
            ("ZADD", self._index, repr(now), name),
            ("SADD", self._prefix + "org:" + org, name),
            ("EXPIRE", self._prefix + "org:" + org, self._ttl),  # its members are gone by then too
            ("ZREMRANGEBYSCORE", self._index, "-inf", repr(now - self._ttl)),
            ("ZCARD", self._index),
        ])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        excess = int(replies[-1]) - self._max
        if excess > 0:
            popped = await self._client.execute("ZPOPMIN", self._index, excess) or []
            # RESP: member, score, member, score...; redis-py: (member, score) pairs.
            names = [p[0] for p in popped] if popped and isinstance(popped[0], (list, tuple)) else popped[0::2]
            if names:
                await self._client.execute("DEL", *names)

    async def clear(self, org: str) -> int:
        members = self._prefix + "org:" + org
        names = await self._client.execute("SMEMBERS", members) or []
        if not names:
            return 0
        replies = await self._client.pipeline([("DEL", *names), ("ZREM", self._index, *names), ("DEL", members)])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return int(replies[0])

    async def close(self) -> None:
        """Nothing of its own: the client is closed by whoever opened it."""


def open_store(engine: AsyncEngine, redis: Client | None, prefix: str, ttl_s: int, max_entries: int) -> CacheStore:
    """Redis when the deployment has it (replicas share entries), else the database."""
    if redis is not None:
        return RedisCacheStore(redis, prefix, ttl_s, max_entries)
    return SqlCacheStore(engine, ttl_s, max_entries)

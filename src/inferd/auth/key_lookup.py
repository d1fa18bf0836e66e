"""The per-request key lookup: a key's record by its access key id, kept while it cannot have changed."""

from __future__ import annotations

import asyncio
import sqlite3

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.auth.key_record import KEY_LOOKUP, KeyRecord, key_record
from inferd.store.hot_sqlite import HotSqlite, is_busy
from inferd.store.key_cache import KeyCache

HOT_KEYS = 4096  # keys kept on SQLite (all dropped when full: a bound, not an eviction policy)


class KeyLookup:
    """Key records by access key id.

    The lookup runs on every request, and a revoked key must fail on the very next request,
    whichever process revoked it. On SQLite it reads through the hot path's synchronous
    connection (never waiting on writers), and found keys are kept while that connection's
    `PRAGMA data_version` stays the same: it changes whenever any other connection, of this
    process or another (a revocation, a key or org update), commits to the database, and not for
    the connection's own usage commits. At c=64 the join was 7% of the server's samples (the
    write-ahead log of usage commits makes its page reads dearer); the check costs a few
    microseconds. On PostgreSQL found keys are cached and every revocation sends a NOTIFY in its
    own transaction; the listener drops the cache when one arrives, and the cache is off
    whenever the listener is not connected.
    """

    def __init__(self, engine: AsyncEngine, hot: HotSqlite | None = None,
                 cache: KeyCache[KeyRecord] | None = None) -> None:
        self._engine = engine
        self._hot = hot
        self._cache = cache  # shared with KeyRepository, whose changes drop it
        self._sqlite_lookup = KEY_LOOKUP.format(param="?")
        self._sql_lookup = text(KEY_LOOKUP.format(param=":access_key_id"))
        self._hot_keys: dict[str, KeyRecord] = {}
        self._hot_version = -1
        self._reading: dict[tuple[str, int], asyncio.Future[KeyRecord | None]] = {}  # PostgreSQL reads under way

    async def lookup(self, access_key_id: str) -> KeyRecord | None:
        """The key with this access key id, or None."""
        if self._hot is not None:
            try:
                conn = self._hot.conn
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._hot_version:
                    self._hot_keys.clear()
                    self._hot_version = version
                record = self._hot_keys.get(access_key_id)
                if record is None:
                    row = conn.execute(self._sqlite_lookup, (access_key_id,)).fetchone()
                    if not row:
                        return None
                    if len(self._hot_keys) >= HOT_KEYS:
                        self._hot_keys.clear()
                    record = self._hot_keys[access_key_id] = key_record(tuple(row))
                return record
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise  # otherwise read through the async engine, which may wait
        cache = self._cache
        if cache is not None:
            cached = cache.get(access_key_id)
            if cached is not None:
                return cached
            # A burst on a key not cached yet (a new key, or after a revocation dropped the cache)
            # reads it once, not once per call: each read holds a pooled connection, and forty at
            # once ran the database out of connections.
            # A read that began before a revocation arrived is not joined: it may return the old row.
            slot = (access_key_id, cache.invalidations)
            reading = self._reading.get(slot)
            if reading is None:
                reading = self._reading[slot] = asyncio.ensure_future(self._read(access_key_id, cache))
                reading.add_done_callback(lambda _: self._reading.pop(slot, None))
            return await asyncio.shield(reading)
        return await self._read(access_key_id, None)

    async def _read(self, access_key_id: str, cache: KeyCache[KeyRecord] | None) -> KeyRecord | None:
        """Read one key from the database (and cache it, unless a revocation arrived meanwhile)."""
        generation = await cache.generation() if cache is not None else 0
        async with self._engine.connect() as conn:
            row = (await conn.execute(self._sql_lookup, {"access_key_id": access_key_id})).first()
        record = key_record(tuple(row)) if row else None
        if cache is not None and record is not None:
            cache.put(record, generation)
        return record

"""A cache of key records on PostgreSQL, dropped by LISTEN/NOTIFY whenever a key or its org changes."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Generic, Protocol, TypeVar

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.store.db import pg_dsn

log = logging.getLogger("inferd.store.key_cache")

KEYS_CHANNEL = "inferd_keys"
_TTL_SECONDS = 60.0  # a safety net: every change through KeyRepository.propagate drops the cache at once
MAX_CACHED = 4096  # records kept at most; past it the oldest go first
_RETRY_SECONDS = 5.0
_HEARD_TIMEOUT_SECONDS = 2.0


class Keyed(Protocol):
    """A cached record: found by its access key id (auth/key_record.py's KeyRecord)."""

    @property
    def access_key_id(self) -> str: ...


R = TypeVar("R", bound=Keyed)


class KeyCache(Generic[R]):
    """Records by access key id, trusted only while the LISTEN connection is up.

    Bounded: every record lives `_TTL_SECONDS` from when it was put, and the map is in that order
    (a record put again moves to the end), so each `put` drops the expired ones from the front (the
    keys never asked for again go too, not only those looked up) and, past `max_size`, the oldest."""

    def __init__(self, engine: AsyncEngine, max_size: int = MAX_CACHED, ttl_s: float = _TTL_SECONDS) -> None:
        self._dsn = pg_dsn(engine.url)
        self._max_size = max_size
        self._ttl = ttl_s
        self._records: dict[str, tuple[R, float]] = {}
        self._generation = 0
        self._listener: asyncpg.Connection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._retry_at = 0.0

    def get(self, access_key_id: str) -> R | None:
        """A cached record, when the listener vouches for it."""
        entry = self._records.get(access_key_id)
        if entry is None or self._listener is None:
            return None
        record, expires = entry
        if time.monotonic() >= expires:
            del self._records[access_key_id]
            return None
        return record

    async def generation(self) -> int:
        """The invalidation count before a read (connecting the listener first when needed)."""
        if self._listener is None and time.monotonic() >= self._retry_at:
            if self._connecting is None:
                self._connecting = asyncio.get_running_loop().create_task(self._connect())
            await asyncio.shield(self._connecting)
        return self._generation

    @property
    def invalidations(self) -> int:
        """How many invalidations (or listener losses) this cache has seen: changes whenever it drops."""
        return self._generation

    def __len__(self) -> int:
        """How many records are held (expired ones not yet dropped included)."""
        return len(self._records)

    def put(self, record: R, generation: int) -> None:
        """Keep a record read at `generation`, unless a revocation arrived since (a cache miss, so
        the cold path: it also drops what expired, and the oldest past `max_size`)."""
        if self._listener is None or generation != self._generation:
            return
        records = self._records
        now = time.monotonic()
        records.pop(record.access_key_id, None)
        records[record.access_key_id] = (record, now + self._ttl)
        while records:
            oldest = next(iter(records))
            if records[oldest][1] > now and len(records) <= self._max_size:
                break
            del records[oldest]

    async def heard(self, generation: int, timeout_s: float = _HEARD_TIMEOUT_SECONDS) -> None:
        """Wait until an invalidation newer than `generation` arrived (or the listener is down, or
        `timeout_s` passed). PostgreSQL delivers a NOTIFY to every listener at the same commit, so
        once this server heard its own, every replica has it on the wire: a change answered after
        this holds on the next request, whichever replica takes it."""
        deadline = time.monotonic() + timeout_s
        while self._generation == generation and self._listener is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.002)

    def _invalidate(self, *_: Any) -> None:
        self._generation += 1
        self._records.clear()

    def _lost(self, *_: Any) -> None:
        if self._listener is None:  # closing
            return
        log.warning("key revocation listener disconnected; key cache off until it reconnects")
        self._listener = None
        self._invalidate()

    async def _connect(self) -> None:
        try:
            conn = await asyncpg.connect(self._dsn)
            await conn.add_listener(KEYS_CHANNEL, self._invalidate)
            conn.add_termination_listener(self._lost)
            self._invalidate()  # anything read before the listener existed is suspect
            self._listener = conn
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("key revocation listener unavailable (%s); key cache off", exc)
            self._retry_at = time.monotonic() + _RETRY_SECONDS
        finally:
            self._connecting = None

    async def close(self) -> None:
        """Close the listener."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()

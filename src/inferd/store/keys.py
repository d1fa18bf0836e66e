"""Long-lived and user keys: create, revoke, and the per-request lookup."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.store.db import utcnow
from inferd.store.hot_sqlite import HotSqlite, is_busy
from inferd.store.key_cache import KEYS_CHANNEL, KeyCache
from inferd.store.orgs import decode_allowed
from inferd.store.tables import api_keys


@dataclass(frozen=True)
class KeyRecord:
    """A key joined with its org and, for user keys, the key it is charged to."""

    id: int
    access_key_id: str
    secret_hash: str
    type: str
    org_id: int
    org_slug: str
    allowed_models: tuple[str, ...] | None
    user_id: int | None
    revoked: bool
    expires_at: datetime | None
    charged_key_id: str  # the key whose budget pays (the parent for user keys)
    budget_usd: float | None
    rpm: int | None
    # The requests-per-minute window this key counts against: its own for a long-lived key; for a
    # user key, one per (parent key, user), so minting more keys never multiplies a user's rate.
    rate_window: str


_LOOKUP = """
SELECT k.id, k.access_key_id, k.secret_hash, k.type, k.org_id, o.slug, o.allowed_models, k.user_id,
       k.revoked_at, k.expires_at, k.budget_usd, k.rpm,
       p.access_key_id, p.budget_usd, p.rpm, p.revoked_at
FROM api_keys k JOIN orgs o ON o.id = k.org_id LEFT JOIN api_keys p ON p.id = k.parent_key_id
WHERE k.access_key_id = {param}
"""


def _when(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def _record(row: tuple[Any, ...]) -> KeyRecord:
    (key_id, access_key_id, secret_hash, key_type, org_id, slug, allowed, user_id, revoked_at, expires_at,
     budget, rpm, parent_access, parent_budget, parent_rpm, parent_revoked) = row
    has_parent = parent_access is not None
    return KeyRecord(
        id=key_id, access_key_id=access_key_id, secret_hash=secret_hash, type=key_type, org_id=org_id,
        org_slug=slug, allowed_models=decode_allowed(allowed), user_id=user_id,
        revoked=revoked_at is not None or (has_parent and parent_revoked is not None),
        expires_at=_when(expires_at),
        charged_key_id=parent_access if has_parent else access_key_id,
        budget_usd=parent_budget if has_parent else budget,
        rpm=parent_rpm if has_parent else rpm,
        rate_window=f"{parent_access}/user/{user_id}" if has_parent else access_key_id,
    )


class KeyRepository:
    """Reads and writes `api_keys`.

    The lookup runs on every request, and a revoked key must fail on the very next request,
    whichever process revoked it. On SQLite it reads through a private synchronous connection
    (a primary-key read in WAL mode takes microseconds and never waits on writers), so nothing
    is cached. On PostgreSQL found keys are cached and every revocation sends a NOTIFY in its
    own transaction; the listener drops the cache when one arrives, and the cache is off
    whenever the listener is not connected.
    """

    def __init__(self, engine: AsyncEngine, hot: HotSqlite | None = None, pg_cache: bool = False) -> None:
        self._engine = engine
        self._hot = hot
        self._cache = KeyCache(engine) if pg_cache and engine.dialect.name == "postgresql" else None
        self._sqlite_lookup = _LOOKUP.format(param="?")
        self._sql_lookup = text(_LOOKUP.format(param=":access_key_id"))

    async def lookup(self, access_key_id: str) -> KeyRecord | None:
        """The key with this access key id, or None."""
        if self._hot is not None:
            try:
                row = self._hot.conn.execute(self._sqlite_lookup, (access_key_id,)).fetchone()
                return _record(tuple(row)) if row else None
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise  # otherwise read through the async engine, which may wait
        cache = self._cache
        if cache is not None:
            cached = cache.get(access_key_id)
            if cached is not None:
                return cached
            generation = await cache.generation()
        async with self._engine.connect() as conn:
            row = (await conn.execute(self._sql_lookup, {"access_key_id": access_key_id})).first()
        record = _record(tuple(row)) if row else None
        if cache is not None and record is not None:
            cache.put(record, generation)
        return record

    async def create(self, *, access_key_id: str, secret_hash: str, key_type: str, org_id: int,
                     name: str | None = None, user_id: int | None = None, budget_usd: float | None = None,
                     rpm: int | None = None, parent_key_id: int | None = None,
                     expires_at: datetime | None = None) -> int:
        """Store a new key (its secret only as a hash); returns the row id."""
        async with self._engine.begin() as conn:
            result = await conn.execute(insert(api_keys).values(
                access_key_id=access_key_id, secret_hash=secret_hash, type=key_type, org_id=org_id, name=name,
                user_id=user_id, budget_usd=budget_usd, rpm=rpm, parent_key_id=parent_key_id,
                expires_at=expires_at, created_at=utcnow()))
            return int(result.inserted_primary_key[0])

    async def revoke(self, access_key_id: str) -> bool:
        """Mark a key revoked; False when no such live key exists."""
        async with self._engine.begin() as conn:
            result = await conn.execute(update(api_keys).where(
                api_keys.c.access_key_id == access_key_id, api_keys.c.revoked_at.is_(None)
            ).values(revoked_at=utcnow()))
            if conn.dialect.name == "postgresql":  # delivered at commit to every server's cache
                await conn.execute(text("SELECT pg_notify(:channel, :key)"),
                                   {"channel": KEYS_CHANNEL, "key": access_key_id})
            return bool(result.rowcount)

    async def close(self) -> None:
        """Close the PostgreSQL listener (the hot SQLite connection belongs to its creator)."""
        if self._cache is not None:
            await self._cache.close()

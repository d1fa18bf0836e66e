"""PostgreSQL's cache of key records stays bounded: records expire `ttl_s` after they were put and
each put drops the expired ones (not only those looked up again), and past `max_size` the oldest
go. The cache's LISTEN connection is the run's real database (skipped on SQLite, which has none)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from inferd.auth.key_record import KeyRecord
from inferd.store.db import create_engine
from inferd.store.key_cache import KeyCache
from tests.harness import Backend


def _record(n: int) -> KeyRecord:
    access = f"IFDKCACHE{n:023d}"
    return KeyRecord(id=n, access_key_id=access, secret_hash="0" * 64, type="application", org_id=1,
                     org_slug="org", allowed_models=None, user_id=None, revoked=False, expires_at=None,
                     charged_key_id=access, budget_usd=None, rpm=None, rate_window=access)


def _with_cache(backend: Backend, work: Any, **options: Any) -> None:
    if not backend.database_url.startswith("postgresql"):
        pytest.skip("the key cache is PostgreSQL's")

    async def go() -> None:
        engine = create_engine(backend.database_url)
        cache = KeyCache(engine, **options)
        try:
            await work(cache, await cache.generation())  # connects the listener
        finally:
            await cache.close()
            await engine.dispose()

    asyncio.run(go())


def test_past_max_size_the_oldest_records_go(backend: Backend) -> None:
    async def work(cache: KeyCache, generation: int) -> None:
        for n in range(100):
            cache.put(_record(n), generation)
        assert len(cache) == 8
        assert [n for n in range(100) if cache.get(_record(n).access_key_id) is not None] == list(range(92, 100))
        cache.put(_record(3), generation)  # put again: the newest now
        assert cache.get(_record(3).access_key_id) is not None and cache.get(_record(92).access_key_id) is None

    _with_cache(backend, work, max_size=8)


def test_expired_records_go_without_being_looked_up(backend: Backend) -> None:
    async def work(cache: KeyCache, generation: int) -> None:
        for n in range(50):
            cache.put(_record(n), generation)
        assert len(cache) == 50
        await asyncio.sleep(0.3)
        cache.put(_record(1000), generation)  # none of the 50 was asked for again
        assert len(cache) == 1 and cache.get(_record(1000).access_key_id) is not None

    _with_cache(backend, work, max_size=4096, ttl_s=0.2)

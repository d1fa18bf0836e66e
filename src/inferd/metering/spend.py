"""The spend an owner has committed, read back from the database: what the spend counters reseed
from (every process's commits)."""

from __future__ import annotations

import sqlite3

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.store.hot_sqlite import HotSqlite, is_busy
from inferd.store.tables import spend

_SQLITE_SPEND = "SELECT COALESCE(SUM(spend_usd), 0.0) FROM spend WHERE scope = ? AND owner = ? AND day >= ?"


async def load_spend(engine: AsyncEngine, scope: str, owner: str, since: str | None,
                     hot: HotSqlite | None = None) -> float:
    """What one owner (`scope` key, team or org) has committed since the day `since` (YYYY-MM-DD;
    None: ever), summed from its days (every process's commits).

    The spend counters re-read this once a second per budget on the request path, so on SQLite it
    reads through the hot connection: a primary-key range read in WAL mode takes microseconds and
    never waits on writers (a busy database falls back to the async engine, which may wait).
    Rows still in a journal count (their replies have left): the caller settles them first."""
    first = since or ""
    if hot is not None:
        try:
            row = hot.conn.execute(_SQLITE_SPEND, (scope, owner, first)).fetchone()
            return float(row[0] or 0.0)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
    async with engine.connect() as conn:
        value = (await conn.execute(select(func.sum(spend.c.spend_usd)).where(
            spend.c.scope == scope, spend.c.owner == owner, spend.c.day >= first))).scalar()
    return float(value or 0.0)

"""The database: one async SQLAlchemy engine for SQLite (WAL) or PostgreSQL, and migrations."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

_MIGRATION_LOCK = 7_270_001  # PostgreSQL advisory lock id: replicas starting together migrate once


# `INFERD_CLOCK_SKEW_S` moves the clock of stored timestamps and budget periods (limits/periods.py)
# by that many seconds: for drills and tests of the day a budget resets, never for production.
CLOCK_SKEW = timedelta(seconds=float(os.environ.get("INFERD_CLOCK_SKEW_S") or 0.0))


def utcnow() -> datetime:
    """Now, as the naive UTC datetime every table stores."""
    return datetime.now(timezone.utc).replace(tzinfo=None) + CLOCK_SKEW


def iso(moment: datetime) -> str:
    """A stored (naive UTC) datetime as RFC 3339 with a `Z`."""
    return moment.isoformat() + "Z"


def as_datetime(value: Any) -> datetime | None:
    """A stored timestamp as a datetime (SQLite's raw reads give its ISO text)."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def async_url(url: str) -> str:
    """Map the operator's URL (sqlite:///…, postgresql://…) to its async driver."""
    if url.startswith("sqlite:///"):
        return "sqlite+aiosqlite:///" + url[len("sqlite:///"):]
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+asyncpg://" + url.split("://", 1)[1]
    return url


def pg_dsn(url: URL) -> str:
    """asyncpg's form of a SQLAlchemy PostgreSQL URL (for the connections inferd opens without
    SQLAlchemy)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def is_sqlite(url: str) -> bool:
    """Whether the URL names an SQLite database."""
    return url.startswith("sqlite")


def create_engine(url: str) -> AsyncEngine:
    """An async engine; SQLite gets WAL, a busy timeout and NORMAL sync (durable across crashes)."""
    if is_sqlite(url):
        path = url.split(":///", 1)[1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(async_url(url), connect_args={"timeout": 30})

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_async_engine(async_url(url), pool_size=10, max_overflow=20, pool_pre_ping=True)


def _upgrade(connection: Connection) -> None:
    config = Config()
    config.set_main_option("script_location", "inferd.store:migrations")
    config.attributes["connection"] = connection
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK})
    command.upgrade(config, "head")


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest migration (run at every start; a no-op when current)."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade)

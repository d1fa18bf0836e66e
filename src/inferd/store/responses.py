"""Stored responses: one row per response made with `store` true, read
back only with the key that made it, for 30 days; the retention job deletes older ones.

A row holds its own turn only: the input items of its request and the response (whose output is
the next turn's input), and `previous_id`, the response it continued. A conversation is rebuilt by
walking that chain back to a row without one (`chain`: one recursive query, every link the same
key's), so a conversation of N turns stores O(N), not the O(N^2) of every row repeating the turns
before it. Rows stored before migration 0011 hold their whole conversation and no `previous_id`: to
the walk they are where a conversation starts, as are rows the service stores whole to bound the
walk (`CHAIN_LIMIT`). A row other rows continue is never removed before them: deleting it only
hides it (`deleted_at`), and an expired one stays, unseen, while it has a continuation; each goes
with the last row that needed it.

Saving is on the hot path (`store` is the default), so it skips SQLAlchemy as the usage writer
does: on SQLite, the rows saved in the same turn of the event loop are inserted together in one
transaction on the loop's own sqlite3 connection (a WAL commit is tens of microseconds, and under
load one commit serves many rows; when another writer holds the lock, a thread of its own with its
own connection waits for it, as the usage writer does, never the loop); on PostgreSQL one statement on a small asyncpg pool. Reads and deletes are cold and go
through the async engine."""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson
from sqlalchemy import delete, exists, insert, literal_column, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.store.db import pg_dsn, utcnow
from inferd.store.hot_sqlite import HotSqlite, is_busy
from inferd.store.tables import responses

RETENTION = timedelta(days=30)
RETENTION_SECONDS = RETENTION.total_seconds()
# Rows a conversation's walk reads at most: the service stores a turn whole (no `previous_id`) once
# its chain would hold more, so every chain ends within it.
CHAIN_LIMIT = 64
_COLUMNS = ("id", "key_id", "created_at", "input_items", "response", "previous_id")
_SQLITE_INSERT = f"INSERT INTO responses ({', '.join(_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)"
_PG_INSERT = f"INSERT INTO responses ({', '.join(_COLUMNS)}) VALUES ($1, $2, $3, $4, $5, $6)"
_PG_POOL_SIZE = 4
_child = responses.alias("child")
_parent = responses.alias("parent")


@dataclass(frozen=True)
class StoredResponse:
    """A response, the input items it answered, and the response those continued (None: the items
    are the whole conversation before it)."""

    id: str
    key_id: str
    input_items: list[dict[str, Any]]
    response: dict[str, Any]
    previous_id: str | None = None


class _SqliteRows:
    """Inserts on the hot sqlite3 connection, the rows of one loop turn in one transaction."""

    def __init__(self, hot: HotSqlite, path: str) -> None:
        self._hot = hot
        self._path = path
        self._pending: list[tuple[tuple[Any, ...], asyncio.Future[None]]] = []
        self._threaded: sqlite3.Connection | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="responses-sqlite")

    async def save(self, values: tuple[Any, ...]) -> None:
        """Insert a row; returns once it is committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((values, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        await future

    @staticmethod
    def _write(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(_SQLITE_INSERT, rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        rows = [values for values, _ in batch]
        try:
            self._write(self._hot.conn, rows)
        except Exception as exc:  # a callback: every waiter must hear how its row fared
            if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
                # Another writer holds the lock: the same rows (SQL text values, as on the loop)
                # go through a thread that waits for it.
                future = asyncio.get_running_loop().run_in_executor(self._executor, self._write_threaded, rows)
                future.add_done_callback(lambda done: _settle(batch, done.exception()))
                return
            _settle(batch, exc)
        else:
            _settle(batch, None)

    def _write_threaded(self, rows: list[tuple[Any, ...]]) -> None:
        if self._threaded is None:
            self._threaded = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            self._threaded.execute("PRAGMA busy_timeout=30000")
        self._write(self._threaded, rows)

    async def close(self) -> None:
        """Close the thread's connection and stop the thread (after any write it is doing)."""
        def shut() -> None:
            if self._threaded is not None:
                self._threaded.close()
                self._threaded = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)


def _settle(batch: list[tuple[tuple[Any, ...], asyncio.Future[None]]], error: BaseException | None) -> None:
    for _, future in batch:
        if not future.done():  # a waiter cancelled (its client left) still had its row written
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


class ResponseRepository:
    """Reads and writes `responses`."""

    def __init__(self, engine: AsyncEngine, hot: HotSqlite | None = None) -> None:
        self._engine = engine
        self._sqlite = _SqliteRows(hot, engine.url.database) if hot is not None and engine.url.database else None
        self._pg_dsn = pg_dsn(engine.url) if engine.dialect.name == "postgresql" else None
        self._pg_pool: asyncio.Task[asyncpg.Pool] | None = None  # opened by the first save

    async def save(self, stored: StoredResponse) -> None:
        """Keep a response (for `RETENTION`)."""
        values = (stored.id, stored.key_id, utcnow(), orjson.dumps(stored.input_items).decode(),
                  orjson.dumps(stored.response).decode(), stored.previous_id)
        if self._sqlite is not None:
            # As SQLAlchemy writes an SQLite DateTime (always with microseconds), so comparisons hold.
            await self._sqlite.save((*values[:2], values[2].isoformat(" ", "microseconds"), *values[3:]))
            return
        if self._pg_dsn is not None:
            await (await self._pool(self._pg_dsn)).execute(_PG_INSERT, *values)
            return
        async with self._engine.begin() as conn:
            await conn.execute(insert(responses).values(dict(zip(_COLUMNS, values))))

    async def _pool(self, dsn: str) -> asyncpg.Pool:
        """The pool, opened once however many saves ask at the same time (again after a failure)."""
        if self._pg_pool is None:
            self._pg_pool = asyncio.ensure_future(asyncpg.create_pool(dsn, min_size=1, max_size=_PG_POOL_SIZE))
        opening = self._pg_pool
        try:
            return await asyncio.shield(opening)
        except Exception:
            if opening.done() and self._pg_pool is opening:
                self._pg_pool = None
            raise

    async def close(self) -> None:
        """Close the SQLite writer's thread and the PostgreSQL pool, if one was opened."""
        if self._sqlite is not None:
            await self._sqlite.close()
        if self._pg_pool is not None:
            pool, self._pg_pool = self._pg_pool, None
            await (await pool).close()

    @staticmethod
    def _visible(response_id: str, key_id: str) -> tuple[Any, ...]:
        """The key's own response, neither deleted nor older than `RETENTION`."""
        return (responses.c.id == response_id, responses.c.key_id == key_id, responses.c.deleted_at.is_(None),
                responses.c.created_at > utcnow() - RETENTION)

    async def get(self, response_id: str, key_id: str) -> StoredResponse | None:
        """The key's unexpired response with this id (None for another key's, as for none)."""
        stmt = select(responses.c.input_items, responses.c.response, responses.c.previous_id).where(
            *self._visible(response_id, key_id))
        async with self._engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return StoredResponse(response_id, key_id, orjson.loads(row.input_items), orjson.loads(row.response),
                              row.previous_id)

    async def chain(self, response_id: str, key_id: str) -> list[StoredResponse]:
        """The key's visible response and the rows it continues, newest first, in one read: at most
        `CHAIN_LIMIT` rows, every one the key's (the walk stops at a link that is not, or is gone,
        and the last row then still names a `previous_id`); empty when the response is not visible."""
        head = select(responses.c.id, responses.c.previous_id, responses.c.input_items, responses.c.response,
                      literal_column("0").label("depth")).where(*self._visible(response_id, key_id))
        walk = head.cte("chain", recursive=True)
        walk = walk.union_all(
            select(_parent.c.id, _parent.c.previous_id, _parent.c.input_items, _parent.c.response,
                   walk.c.depth + 1)
            .where(_parent.c.id == walk.c.previous_id, _parent.c.key_id == key_id, walk.c.depth < CHAIN_LIMIT - 1))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(select(walk).order_by(walk.c.depth))).all()
        return [StoredResponse(row.id, key_id, orjson.loads(row.input_items), orjson.loads(row.response),
                               row.previous_id) for row in rows]

    async def delete(self, response_id: str, key_id: str) -> bool:
        """Delete the key's visible response; False when it had none with this id. One that others
        continue is hidden instead (their conversations still hold its turn); deleting the last
        continuation of hidden rows removes them too."""
        childless = ~exists().where(_child.c.previous_id == responses.c.id)
        async with self._engine.begin() as conn:
            # The first statement writes, so on SQLite the transaction holds the write lock throughout.
            gone = (await conn.execute(delete(responses).where(*self._visible(response_id, key_id), childless)
                                       .returning(responses.c.previous_id))).first()
            if gone is None:
                hidden = await conn.execute(update(responses).where(*self._visible(response_id, key_id))
                                            .values(deleted_at=utcnow()))
                return bool(hidden.rowcount)
            previous = gone.previous_id
            for _ in range(CHAIN_LIMIT):
                if previous is None:
                    break
                previous = (await conn.execute(
                    delete(responses).where(responses.c.id == previous, responses.c.key_id == key_id,
                                            responses.c.deleted_at.is_not(None), childless)
                    .returning(responses.c.previous_id))).scalar()
        return True

    async def delete_older(self, before: datetime) -> int:
        """Delete every response made before `before` that no row continues (the retention job),
        again until none is left, so an expired chain goes from its newest row back; returns how
        many. An expired row that a younger one continues stays (unseen) until that one goes."""
        deleted = 0
        childless = ~exists().where(_child.c.previous_id == responses.c.id)
        for _ in range(CHAIN_LIMIT + 1):
            async with self._engine.begin() as conn:
                result = await conn.execute(delete(responses).where(responses.c.created_at < before, childless))
            if not result.rowcount:
                break
            deleted += int(result.rowcount)
        return deleted

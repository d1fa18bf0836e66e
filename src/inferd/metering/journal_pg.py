"""The usage writer of a PostgreSQL deployment: a row is durable in this process's journal, in
the shared data dir, before the reply; the rows are folded into PostgreSQL in batches, each batch
one statement on an asyncpg connection of the writer's own (fold_pg.py says how folds by
several processes write every row once).

Before, a reply waited for its row's commit: a round trip to PostgreSQL, a WAL flush, and the
wake-up after them, on every call. At concurrency 1 that cost the gateway more CPU than the rest
of a proxied call (issue 15). The spend still reaches Redis (or this process's counters) when the
row is written, so budgets see it at once on every replica.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Awaitable, Callable, TypeVar

import asyncpg
from sqlalchemy.engine import URL

from inferd.limits.base import SpendCounter
from inferd.metering.fold_pg import directory_id, fold, journal_dir, settle
from inferd.metering.journal_file import JournalFile
from inferd.metering.journal_sqlite import JournalWriter
from inferd.observe.metrics import Metrics
from inferd.store.db import pg_dsn

log = logging.getLogger("inferd.metering")

T = TypeVar("T")


def pg_journal_dir(data_dir: Path, url: URL) -> Path:
    """The journals' folder of the database at `url` (its host, port and name, not its user or
    password, which replicas may not share)."""
    return journal_dir(data_dir.resolve(), f"{url.host or ''}:{url.port or 5432}/{url.database or ''}")


async def settle_database(url: URL, data_dir: Path) -> int:
    """Fold every journal of the database at `url` on a connection of its own (the CLI, tests)."""
    conn = await asyncpg.connect(pg_dsn(url))
    try:
        return await settle(conn, pg_journal_dir(data_dir, url))
    finally:
        await conn.close()


class PgJournaledUsageWriter(JournalWriter):
    """PostgreSQL's: every fold and settle on one connection, one at a time."""

    def __init__(self, url: URL, data_dir: Path, spend: SpendCounter, metrics: Metrics) -> None:
        self._directory = pg_journal_dir(data_dir, url)
        super().__init__(JournalFile(self._directory), spend, metrics)
        self._dsn = pg_dsn(url)
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._folder = ""  # the folder's id (fold_pg.directory_id), read at start

    def start(self) -> None:
        """Open this process's journal; fold what dead processes left in theirs (in a task: the
        rows are durable meanwhile, and any reader folds them first)."""
        self._loop = asyncio.get_running_loop()
        self._journal.open()
        self._folder = directory_id(self._directory)
        self._folding = self._loop.create_task(self._recover(), name="usage-recover")

    async def _recover(self) -> None:
        try:
            recovered = await self._on_connection(lambda conn: settle(conn, self._directory))
            if recovered:
                log.info("folded %d usage rows left in the journals of stopped processes", recovered)
        except Exception as exc:  # the rows stay in the journals for the next reader or start
            log.warning("could not fold the usage journals of stopped processes: %s", exc)
        self._folding = None
        if self._journal.pending and self._timer is None:
            self._timer = self._loop.call_later(0, self._fold_due)

    async def _on_connection(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Run `work` on the writer's connection, opened when needed; a broken one is dropped and
        the next call opens a new one."""
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                self._conn = await asyncpg.connect(self._dsn)
            try:
                return await work(self._conn)
            except (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError):
                conn, self._conn = self._conn, None
                conn.terminate()
                raise

    async def _fold(self, conn: asyncpg.Connection) -> None:
        if self._journal.orphaned:  # a journal left after a failed write holds pending rows
            await settle(conn, self._directory)
            self._journal.orphaned = False
        await fold(conn, self._journal, self._folder)

    def _fold_due(self) -> None:
        self._cancel_timer()
        if self._folding is None and (self._journal.pending or self._journal.orphaned):
            self._folding = self._loop.create_task(
                self._fold_off_loop(time.perf_counter(), self._on_connection(self._fold)), name="usage-fold")

    async def settle(self) -> None:
        """Fold every journal of the deployment now: a read of usage or spend after this sees every
        row whose reply has left, whichever replica wrote it (they share the data dir)."""
        await self._on_connection(lambda conn: settle(conn, self._directory))
        self._journal.orphaned = False

    async def close(self) -> None:
        """Fold what is pending and stop; rows a failing database could not take stay in the
        journal for the next start or reader."""
        self._cancel_timer()
        if self._folding is not None:
            await self._folding
            self._cancel_timer()
        try:
            await self._on_connection(self._fold)
        except Exception as exc:
            log.warning("usage rows left in the journal %s at shutdown: %s", self._journal.name, exc)
        self._journal.close()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

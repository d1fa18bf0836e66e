"""The usage writer of a database without a journal (SQLite in memory): it commits every row
before its reply, all rows waiting when it wakes in one transaction.

Every metered reply waits until its own row is durable before it finishes (before `[DONE]` on a
stream), so a crash can never lose the row of a reply the client received. A file-backed SQLite
database and PostgreSQL make it durable in a journal file instead (journal_sqlite.py,
journal_pg.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.limits.base import SpendCounter
from inferd.metering.recorder import AfterCommit, MeteredCalls
from inferd.metering.usage import Usage
from inferd.observe.metrics import Metrics
from inferd.store.usage_write import Amounts, UsageWrites, spend_amounts

log = logging.getLogger("inferd.metering")

_MAX_COMMIT_ATTEMPTS = 5


class SqlAlchemySink:
    """Commits batches through the async engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._writes = UsageWrites(engine.dialect.name)

    async def commit(self, rows: list[dict[str, Any]], amounts: Amounts) -> None:
        """Insert the rows and add to the spend and usage rollups in one transaction."""
        async with self._engine.begin() as conn:
            for statement, parameters in self._writes.writes(rows, amounts):
                await conn.execute(statement, parameters)

    async def close(self) -> None:
        """Nothing of its own to release."""


UsageSink = SqlAlchemySink


def usage_sink(engine: AsyncEngine) -> UsageSink:
    """The sink of a database without a journal (SQLite in memory; a file-backed SQLite database
    and PostgreSQL have journals instead: journal_sqlite.py, journal_pg.py)."""
    return SqlAlchemySink(engine)


class UsageWriter:
    """Queues usage rows and commits everything waiting in one transaction."""

    def __init__(self, sink: UsageSink, spend: SpendCounter, metrics: Metrics) -> None:
        self._sink = sink
        self._metrics = metrics
        self._after_commit = AfterCommit(spend, metrics)
        self._pending: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._committing = 0
        self.metered_calls = MeteredCalls()  # between their engine call and their row (counted by callers)

    @property
    def pending(self) -> int:
        """Rows waiting for their commit (`inferd_usage_rows_pending`)."""
        return len(self._pending)

    def start(self) -> None:
        """Start the writer task on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name="usage-writer")

    async def record(self, usage: Usage) -> None:
        """Queue a row and return once it is committed. A caller cancelled while waiting cancels
        only its wait: the row is already in the batch and is committed all the same.

        When no other metered call is under way nothing could share the transaction, so the
        row is committed at once, without the two loop turns a hop through the writer costs."""
        future: asyncio.Future[None] = self._loop.create_future()
        if self.metered_calls.count <= 1 and not self._pending and not self._committing:
            await self._commit([(usage.row(), future)])
        else:
            self._pending.append((usage.row(), future))
            self._wake.set()
        await future

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending, []
                await self._commit(batch)
            if self._closing:
                return

    async def _commit(self, batch: list[tuple[dict[str, Any], asyncio.Future[None]]]) -> None:
        rows = [row for row, _ in batch]
        amounts = spend_amounts(rows)
        error: BaseException | None = None
        self._committing += 1
        try:
            for attempt in range(_MAX_COMMIT_ATTEMPTS):
                try:
                    began = time.perf_counter()
                    await self._sink.commit(rows, amounts)
                    self._metrics.commit_seconds(time.perf_counter() - began)
                    error = None
                    break
                except Exception as exc:  # the database may be briefly locked or restarting
                    error = exc
                    log.warning("usage commit failed (attempt %d): %s", attempt + 1, exc)
                    await asyncio.sleep(0.05 * 2 ** attempt)
        finally:
            self._committing -= 1
        if error is None:
            await self._after_commit(rows, amounts)
        for _, future in batch:
            if not future.done():
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)

    async def settle(self) -> None:
        """Nothing to do before a read: every reply's row was committed before it left."""

    async def close(self) -> None:
        """Commit what is waiting and stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        while self._pending:
            batch, self._pending = self._pending, []
            await self._commit(batch)
        await self._sink.close()

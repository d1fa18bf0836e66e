"""The usage writers of a file-backed deployment: a row is durable in the journal before the
reply, and folded into the tables many rows at a time (journal_file.py says why and how).

A reply waits for one `write` of its row, not for a commit: the commit of one row was most of a
proxied call's CPU at concurrency 1 (issue 15). The rows are folded FOLD_DELAY after the first of
them. Readers of usage or spend call `settle` first, so they see every row whose reply has left.
This module holds what both writers share and SQLite's, which folds on the event loop's own
connection (a fold of a few rows takes tens of microseconds, cheaper than a hop to a thread), or
in a thread that waits when another process holds the write lock. PostgreSQL's is in
journal_pg.py.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable

from inferd.limits.base import SpendCounter
from inferd.metering.journal_file import JournalFile, journal_dir, settle, settle_path
from inferd.metering.recorder import AfterCommit, MeteredCalls
from inferd.metering.usage import Usage
from inferd.observe.metrics import Metrics
from inferd.store.hot_sqlite import HotSqlite, is_busy
from inferd.store.usage_write import spend_amounts

log = logging.getLogger("inferd.metering")

FOLD_DELAY = 0.01  # seconds from a first pending row to the fold that takes it and those after it
FOLD_AT_ONCE = 512  # this many pending rows fold without waiting for the delay
_RETRY_CAP = 5.0  # seconds between attempts while folds keep failing (the rows wait in the journal)


async def settle_journals(hot: HotSqlite) -> None:
    """Fold every usage journal of a SQLite database now (journal_file.py `settle`): on the
    loop's own connection, or in a thread that waits while another process holds the write lock."""
    try:
        settle(hot.conn, hot.path)
    except sqlite3.OperationalError as exc:
        if not is_busy(exc):
            raise
        await asyncio.to_thread(settle_path, hot.path)


class JournalWriter:
    """Appends each call's row to this process's journal and schedules folds; a subclass folds."""

    def __init__(self, journal: JournalFile, spend: SpendCounter, metrics: Metrics) -> None:
        self._journal = journal
        self._metrics = metrics
        self._after_commit = AfterCommit(spend, metrics)
        self._timer: asyncio.TimerHandle | None = None
        self._folding: asyncio.Task[None] | None = None  # a fold longer than a loop turn (a thread, a round trip)
        self._failures = 0
        self.metered_calls = MeteredCalls()  # counted by callers; the group commit's hint, unused here

    @property
    def pending(self) -> int:
        """Rows durable in the journal, not folded yet (`inferd_usage_rows_pending`)."""
        return len(self._journal.pending)

    def record(self, usage: Usage) -> Awaitable[None]:
        """Make the row durable (one write to the journal) and schedule its fold; the awaitable
        returned is its `AfterCommit` step (the call's only coroutine here). Raises OSError when
        the journal cannot be written, and then the call's reply must not claim its row."""
        row = usage.row()
        self._journal.append(row)
        if self._folding is None:
            if len(self._journal.pending) >= FOLD_AT_ONCE:
                self._fold_due()
            elif self._timer is None:
                self._timer = self._loop.call_later(FOLD_DELAY, self._fold_due)
        rows = (row,)
        return self._after_commit(rows, spend_amounts(rows) if row["cost_usd"] else None)

    def _fold_due(self) -> None:
        """Fold the pending rows now (the timer's callback)."""
        raise NotImplementedError

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _fold_off_loop(self, began: float, fold: Awaitable[None]) -> None:
        """Wait for a fold that does not run in this loop turn, then count it or retry later."""
        try:
            await fold
        except Exception as exc:
            self._folding = None
            self._failed(exc)
            return
        self._folding = None
        self._folded(began)

    def _folded(self, began: float) -> None:
        self._metrics.commit_seconds(time.perf_counter() - began)
        self._failures = 0
        try:
            self._journal.rotate_if_long()
        except OSError as exc:
            log.warning("could not replace the usage journal: %s", exc)
        if self._journal.pending and self._timer is None:  # rows that came during a fold off the loop
            self._timer = self._loop.call_later(FOLD_DELAY, self._fold_due)

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        log.warning("usage fold failed (attempt %d); the rows wait in the journal: %s", self._failures, exc)
        if self._timer is None:
            self._timer = self._loop.call_later(min(FOLD_DELAY * 2 ** self._failures, _RETRY_CAP), self._fold_due)


class JournaledUsageWriter(JournalWriter):
    """SQLite's: folds on the loop's connection, or in a thread while another process writes."""

    def __init__(self, hot: HotSqlite, spend: SpendCounter, metrics: Metrics) -> None:
        super().__init__(JournalFile(journal_dir(hot.path)), spend, metrics)
        self._hot = hot
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-sqlite")
        self._threaded: sqlite3.Connection | None = None  # the thread's connection, which waits for locks

    def start(self) -> None:
        """Open this process's journal and fold what dead processes left in theirs."""
        self._loop = asyncio.get_running_loop()
        self._journal.open()
        recovered = settle_path(self._hot.path)
        if recovered:
            log.info("folded %d usage rows left in the journals of stopped processes", recovered)

    async def settle(self) -> None:
        """Fold every process's journal now: a read of usage or spend after this sees every row
        whose reply has left."""
        await settle_journals(self._hot)
        self._journal.orphaned = False

    def _fold_due(self) -> None:
        self._cancel_timer()
        if not self._journal.pending and not self._journal.orphaned:
            return
        began = time.perf_counter()
        try:
            self._fold(self._hot.conn)
        except sqlite3.OperationalError as exc:
            if is_busy(exc):  # another process is writing: wait for it in the thread
                waiting = self._loop.run_in_executor(self._executor, self._fold_waiting)
                self._folding = self._loop.create_task(self._fold_off_loop(began, waiting), name="usage-fold")
            else:
                self._failed(exc)
            return
        except Exception as exc:
            self._failed(exc)
            return
        self._folded(began)

    def _fold(self, conn: sqlite3.Connection) -> None:
        if self._journal.orphaned:  # a journal left after a failed write holds pending rows
            settle(conn, self._hot.path)
            self._journal.orphaned = False
        self._journal.fold(conn)

    def _fold_waiting(self) -> None:
        if self._threaded is None:
            self._threaded = sqlite3.connect(self._hot.path, isolation_level=None, check_same_thread=False)
            self._threaded.execute("PRAGMA busy_timeout=30000")
        self._fold(self._threaded)

    async def close(self) -> None:
        """Fold what is pending (waiting for the lock) and stop; rows a failing database could
        not take stay in the journal for the next start."""
        self._cancel_timer()
        if self._folding is not None:
            await self._folding
            self._cancel_timer()
        try:
            await self._loop.run_in_executor(self._executor, self._fold_waiting)
        except Exception as exc:
            log.warning("usage rows left in the journal %s at shutdown: %s", self._journal.name, exc)
        self._journal.close()

        def shut() -> None:
            if self._threaded is not None:
                self._threaded.close()
                self._threaded = None

        await self._loop.run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)


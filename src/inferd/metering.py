"""Pricing, usage rows and spend, and the writer of a database without a journal.

Every metered reply waits until its own row is durable before it finishes (before `[DONE]` on a
stream), so a crash can never lose the row of a reply the client received. A file-backed SQLite
database and PostgreSQL make it durable in a journal file (metering_journal.py,
metering_journal_pg.py). The writer here (SQLite in memory) commits it: all rows waiting when it
wakes go in one transaction.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.auth.key_record import KeyRecord
from inferd.config import Cost, ModelConfig
from inferd.limits.base import SpendCounter
from inferd.observe.metrics import Metrics
from inferd.store.db import utcnow
from inferd.store.hot_sqlite import HotSqlite, is_busy
from inferd.store.tables import spend
from inferd.store.usage_write import Amounts, UsageWrites, spend_amounts

log = logging.getLogger("inferd.metering")

_MAX_COMMIT_ATTEMPTS = 5


def token_cost(cost: Cost | None, prompt_tokens: int, completion_tokens: int, factor: float = 1.0) -> float:
    """USD for a call: tokens priced per million at the model's rates, times `factor` (batches: 0.5)."""
    if cost is None:
        return 0.0
    return factor * (prompt_tokens * cost.input_per_m_token + completion_tokens * cost.output_per_m_token) / 1e6


@dataclass
class Usage:
    """What one metered call used and who pays for it."""

    org: str
    deployment: str
    key_id: str
    user_id: str | None
    model: str
    workspace: str
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    latency_ms: int
    status_code: int
    cost_usd: float
    metadata: dict[str, str] | None
    team_id: int | None = None

    def row(self) -> dict[str, Any]:
        """The `usage_rows` values for this call."""
        created_at = utcnow()
        return {
            "org": self.org, "deployment": self.deployment, "key_id": self.key_id, "user_id": self.user_id,
            "team_id": self.team_id, "model": self.model, "workspace": self.workspace,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens, "latency_ms": self.latency_ms,
            "status_code": self.status_code, "cost_usd": self.cost_usd, "created_at": created_at,
            "metadata": orjson.dumps(self.metadata).decode() if self.metadata else None,
        }


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
    and PostgreSQL have journals instead: metering_journal.py, metering_journal_pg.py)."""
    return SqlAlchemySink(engine)


def usage_for(key: KeyRecord, config: ModelConfig, workspace: str, status: int, prompt: int, completion: int, *,
              started: float, cached: int = 0, metadata: dict[str, str] | None = None,
              price_factor: float = 1.0, cost_usd: float | None = None) -> Usage:
    """The usage of one call of `key` on the deployment `config`, priced from the catalogue
    (per token, unless `cost_usd` gives the price, as images do per generation)."""
    return Usage(org=key.org_slug, team_id=key.team_id, deployment=config.deployment_name, key_id=key.charged_key_id,
                 user_id=str(key.user_id) if key.user_id is not None else None, model=config.id,
                 workspace=workspace, prompt_tokens=prompt, completion_tokens=completion,
                 cached_prompt_tokens=cached if config.prefix_cache else 0,
                 latency_ms=int((time.perf_counter() - started) * 1000), status_code=status,
                 cost_usd=token_cost(config.cost, prompt, completion, price_factor) if cost_usd is None else cost_usd,
                 metadata=metadata)


class UsageRecorder(Protocol):
    """What callers need of a usage writer (this module's, or the SQLite journal's)."""

    active: int  # metered calls under way, kept by callers

    @property
    def pending(self) -> int:
        """Rows not committed yet."""

    def start(self) -> None:
        """Start on the running loop."""

    async def record(self, usage: Usage) -> None:
        """Return once the row is durable."""

    async def settle(self) -> None:
        """Make every durable row visible to a read of the tables."""

    async def close(self) -> None:
        """Write what is waiting and stop."""


class UsageWriter:
    """Queues usage rows and commits everything waiting in one transaction."""

    def __init__(self, sink: UsageSink, spend: SpendCounter, metrics: Metrics) -> None:
        self._sink = sink
        self._spend = spend
        self._metrics = metrics
        self._pending: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._committing = 0
        self.active = 0  # metered calls between their engine call and their row (kept by callers)

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
        if self.active <= 1 and not self._pending and not self._committing:
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
            count = self._metrics.usage
            for row in rows:
                count(row["model"], row["prompt_tokens"], row["completion_tokens"], row["cached_prompt_tokens"],
                      row["cost_usd"])
            try:
                await self._spend.add(amounts)
            except Exception as exc:  # the rows are safe; counters reseed from the database
                log.warning("spend counter update failed: %s", exc)
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

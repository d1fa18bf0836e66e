"""Batches and their lines: creation, listing, the worker's lease-fenced claims and records.

Every write the worker makes checks its lease in the same transaction (`_fence`), so a worker
that lost its lease (it stalled past the expiry and another took over) can never record a line
twice; a line's result and its usage row commit together, so a crash loses both or neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable

import orjson
from sqlalchemy import Connection, Engine, bindparam, create_engine, exists, func, insert, or_, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.db import utcnow
from inferd.store.files import select_owned
from inferd.store.tables import api_keys, batch_lines, batches, files
from inferd.store.usage_write import UsageWrites, spend_amounts

LIVE = ("validating", "in_progress", "finalizing", "cancelling")
TERMINAL = ("completed", "failed", "expired", "cancelled")
KEY_REVOKED = "key_revoked"  # `cancel_reason` of a batch stopped because its key was revoked
_INSERT_CHUNK = 500

_key = api_keys.alias("k")
_parent = api_keys.alias("p")
# A key is revoked when it or the key that minted it is.
_REVOKED = or_(_key.c.revoked_at.is_not(None), _parent.c.revoked_at.is_not(None))
_KEYS = _key.outerjoin(_parent, _parent.c.id == _key.c.parent_key_id)


class LeaseLost(Exception):
    """Another worker holds the batch now: stop touching it."""


@dataclass(frozen=True)
class LineResult:
    """What running one line produced: its state, its output/error line, its usage row if it ran."""

    line_no: int
    state: str  # succeeded | failed
    result: bytes
    usage_row: dict[str, Any] | None


class BatchRepository:
    """Reads and writes `batches` and `batch_lines`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._pg = engine.dialect.name == "postgresql"
        self._usage = UsageWrites(engine.dialect.name)
        self._inline: Engine | None = None
        if not self._pg and engine.url.database and engine.url.database != ":memory:":
            self._inline = create_engine(f"sqlite:///{engine.url.database}", connect_args={"timeout": 0})
        self._record_line = update(batch_lines).where(
            batch_lines.c.batch_id == bindparam("b_batch"), batch_lines.c.line_no == bindparam("b_line")).values(
            state=bindparam("b_state"), result=bindparam("b_result"))

    # --- the API side ----------------------------------------------------------------------

    async def create(self, values: dict[str, Any]) -> dict[str, Any]:
        """Insert a new batch; returns its row."""
        async with self._engine.begin() as conn:
            await conn.execute(insert(batches).values(**values))
            return dict((await conn.execute(select(batches).where(batches.c.id == values["id"]))).mappings().one())

    async def get(self, batch_id: str, org_id: int | None = None, key_id: str | None = None) -> dict[str, Any] | None:
        """A batch row, or None when missing, (with `org_id`) another org's or (with `key_id`) another key's."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select_owned(batches, batch_id, org_id, key_id))).mappings().first()
        return dict(row) if row else None

    async def counts(self, batch_ids: list[str]) -> dict[str, dict[str, int]]:
        """Lines per state, per batch."""
        if not batch_ids:
            return {}
        query = (select(batch_lines.c.batch_id, batch_lines.c.state, func.count())
                 .where(batch_lines.c.batch_id.in_(batch_ids), batch_lines.c.state != "pending")
                 .group_by(batch_lines.c.batch_id, batch_lines.c.state))
        result: dict[str, dict[str, int]] = {batch_id: {} for batch_id in batch_ids}
        async with self._engine.connect() as conn:
            for batch_id, state, count in (await conn.execute(query)).all():
                result[batch_id][state] = int(count)
        return result

    async def page(self, org_id: int, key_id: str | None, limit: int, after_seq: int | None) -> list[dict[str, Any]]:
        """Up to `limit` batches of an org (with `key_id`, of that key only), newest first, older
        than `after_seq` when given."""
        query = select(batches).where(batches.c.org_id == org_id)
        if key_id is not None:
            query = query.where(batches.c.key_id == key_id)
        if after_seq is not None:
            query = query.where(batches.c.seq < after_seq)
        query = query.order_by(batches.c.seq.desc()).limit(limit)
        async with self._engine.connect() as conn:
            return [dict(r) for r in (await conn.execute(query)).mappings()]

    async def request_cancel(self, batch_id: str, owner: str, lease_seconds: float) -> str:
        """Move a live batch to `cancelling`. Returns `leased` when a worker runs it (it drains
        and finishes the cancel), `ours` when nobody did (the lease is now `owner`'s: the caller
        finalises it at once), or `unchanged`."""
        now = utcnow()
        async with self._engine.begin() as conn:
            free = or_(batches.c.lease_until.is_(None), batches.c.lease_until < now)
            taken = await conn.execute(update(batches).where(
                batches.c.id == batch_id, batches.c.status == "in_progress", free).values(
                status="cancelling", cancelling_at=now, lease_owner=owner,
                lease_until=now + timedelta(seconds=lease_seconds)))
            if taken.rowcount:
                return "ours"
            marked = await conn.execute(update(batches).where(
                batches.c.id == batch_id, batches.c.status == "in_progress").values(
                status="cancelling", cancelling_at=now))
            return "leased" if marked.rowcount else "unchanged"

    # --- the worker side -------------------------------------------------------------------

    async def claim(self, owner: str, lease_seconds: float, skip: Iterable[str] = (),
                    due_only: bool = False) -> dict[str, Any] | None:
        """Lease the oldest live batch nobody holds (SKIP LOCKED on PostgreSQL); with `due_only`,
        one that only needs finishing: its window has elapsed or its key was revoked."""
        now = utcnow()
        free = or_(batches.c.lease_until.is_(None), batches.c.lease_until < now)
        query = select(batches.c.id).where(batches.c.status.in_(("in_progress", "cancelling")), free)
        if due_only:
            revoked = exists(select(_key.c.id).select_from(_KEYS).where(
                _key.c.access_key_id == batches.c.key_id, _REVOKED))
            query = query.where(or_(batches.c.expires_at <= now, revoked))
        skipped = list(skip)
        if skipped:
            query = query.where(batches.c.id.notin_(skipped))
        query = query.order_by(batches.c.seq).limit(1)
        if self._pg:
            query = query.with_for_update(skip_locked=True, of=batches)
        async with self._engine.begin() as conn:
            batch_id = (await conn.execute(query)).scalar()
            if batch_id is None:
                return None
            # The WHERE repeats the freeness test: on SQLite two claimers may both have read it.
            won = await conn.execute(update(batches).where(batches.c.id == batch_id, free).values(
                lease_owner=owner, lease_until=now + timedelta(seconds=lease_seconds)))
            if not won.rowcount:
                return None
            return dict((await conn.execute(select(batches).where(batches.c.id == batch_id))).mappings().one())

    @staticmethod
    def _fence_statement(batch_id: str, owner: str, lease_seconds: float, now: datetime) -> Any:
        """Renew our lease, returning the status; no row when the lease is no longer ours."""
        return update(batches).where(
            batches.c.id == batch_id, batches.c.lease_owner == owner, batches.c.lease_until >= now).values(
            lease_until=now + timedelta(seconds=lease_seconds)).returning(batches.c.status)

    async def _fence(self, conn: AsyncConnection, batch_id: str, owner: str, lease_seconds: float) -> str:
        """Renew the lease inside `conn`'s transaction; the batch's status, or LeaseLost."""
        status = (await conn.execute(self._fence_statement(batch_id, owner, lease_seconds, utcnow()))).scalar()
        if status is None:
            raise LeaseLost(batch_id)
        return str(status)

    async def renew(self, batch_id: str, owner: str, lease_seconds: float) -> str:
        """Extend the lease; returns the batch's status (LeaseLost when it is no longer ours)."""
        async with self._engine.begin() as conn:
            return await self._fence(conn, batch_id, owner, lease_seconds)

    async def key_revoked(self, access_key_id: str) -> bool:
        """Whether the key (or the key that minted it) is revoked; a key that is gone counts as revoked.

        Read from the table, never a cache: the worker must see a revocation made by any process."""
        query = select(_REVOKED).select_from(_KEYS).where(_key.c.access_key_id == access_key_id)
        async with self._engine.connect() as conn:
            revoked = (await conn.execute(query)).scalar()
        return revoked is None or bool(revoked)

    async def stop_for_revoked_key(self, batch_id: str, owner: str, lease_seconds: float) -> str:
        """Move our `in_progress` batch to `cancelling` because its key was revoked (a batch already
        cancelling keeps its reason); returns the status, or LeaseLost."""
        async with self._engine.begin() as conn:
            status = await self._fence(conn, batch_id, owner, lease_seconds)
            if status != "in_progress":
                return status
            await conn.execute(update(batches).where(batches.c.id == batch_id, batches.c.status == "in_progress")
                               .values(status="cancelling", cancelling_at=utcnow(), cancel_reason=KEY_REVOKED))
            return "cancelling"

    async def release(self, batch_id: str, owner: str) -> None:
        """Give the lease back (a clean stop)."""
        async with self._engine.begin() as conn:
            await conn.execute(update(batches).where(batches.c.id == batch_id, batches.c.lease_owner == owner)
                               .values(lease_owner=None, lease_until=None))

    async def store_lines(self, batch_id: str, owner: str, lease_seconds: float,
                          lines: list[tuple[str, bytes]]) -> None:
        """The validated input: every line pending, `total` set, in one transaction."""
        async with self._engine.begin() as conn:
            await self._fence(conn, batch_id, owner, lease_seconds)
            rows = [{"batch_id": batch_id, "line_no": i, "custom_id": custom_id, "body": body.decode(),
                     "state": "pending", "result": None} for i, (custom_id, body) in enumerate(lines)]
            for start in range(0, len(rows), _INSERT_CHUNK):
                await conn.execute(insert(batch_lines), rows[start:start + _INSERT_CHUNK])
            await conn.execute(update(batches).where(batches.c.id == batch_id).values(
                validated=True, total=len(rows)))

    async def pending(self, batch_id: str, after_line: int, limit: int) -> list[tuple[int, str, str]]:
        """Pending lines after `after_line`: (line number, custom_id, body)."""
        query = (select(batch_lines.c.line_no, batch_lines.c.custom_id, batch_lines.c.body)
                 .where(batch_lines.c.batch_id == batch_id, batch_lines.c.state == "pending",
                        batch_lines.c.line_no > after_line)
                 .order_by(batch_lines.c.line_no).limit(limit))
        async with self._engine.connect() as conn:
            return [(int(n), str(c), str(b)) for n, c, b in (await conn.execute(query)).all()]

    async def record(self, batch_id: str, owner: str, lease_seconds: float,
                     results: list[LineResult]) -> dict[tuple[str, str], float]:
        """Each line's result and its usage row (with the rollups) in one transaction.

        A line already recorded is skipped with its usage row. Returns the spend added, per
        (key, month), for the in-memory or Redis counters."""
        if self._inline is not None:
            # SQLite: commit on the loop's thread (a WAL commit takes microseconds), since every
            # aiosqlite statement is a thread hop that stalls the loop on the GIL. When another
            # process holds the write lock, fall through to the async engine, which may wait.
            try:
                with self._inline.begin() as conn:
                    return self._record(conn, batch_id, owner, lease_seconds, results)
            except OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
        async with self._engine.begin() as conn:
            return await conn.run_sync(self._record, batch_id, owner, lease_seconds, results)

    def _record(self, conn: Connection, batch_id: str, owner: str, lease_seconds: float,
                results: list[LineResult]) -> dict[tuple[str, str], float]:
        now = utcnow()
        if conn.execute(self._fence_statement(batch_id, owner, lease_seconds, now)).scalar() is None:
            raise LeaseLost(batch_id)
        # The fence above serialises writers of this batch, so this read stays true to commit.
        still_pending = set(conn.execute(select(batch_lines.c.line_no).where(
            batch_lines.c.batch_id == batch_id, batch_lines.c.state == "pending",
            batch_lines.c.line_no.in_([line.line_no for line in results]))).scalars())
        todo = [line for line in results if line.line_no in still_pending]
        if todo:
            conn.execute(self._record_line, [{"b_batch": batch_id, "b_line": line.line_no, "b_state": line.state,
                                              "b_result": line.result.decode()} for line in todo])
        rows = [line.usage_row for line in todo if line.usage_row is not None]
        amounts = spend_amounts(rows)
        if rows:  # as the usage writer commits them: rows, the rollups, the spend
            for statement, parameters in self._usage.writes(rows, amounts):
                conn.execute(statement, parameters)
        return amounts

    async def all_lines(self, batch_id: str) -> list[tuple[int, str, str, str | None]]:
        """Every line: (line number, custom_id, state, result)."""
        query = (select(batch_lines.c.line_no, batch_lines.c.custom_id, batch_lines.c.state, batch_lines.c.result)
                 .where(batch_lines.c.batch_id == batch_id).order_by(batch_lines.c.line_no))
        async with self._engine.connect() as conn:
            return [(int(n), str(c), str(s), r) for n, c, s, r in (await conn.execute(query)).all()]

    async def finish(self, batch_id: str, owner: str, lease_seconds: float, status: str,
                     new_files: list[dict[str, Any]], retention_seconds: float,
                     errors: dict[str, Any] | None = None) -> None:
        """The terminal status, the output/error file rows and their retention, in one transaction."""
        now = utcnow()
        expires = now + timedelta(seconds=retention_seconds)
        async with self._engine.begin() as conn:
            if await self._fence(conn, batch_id, owner, lease_seconds) == "cancelling" and status == "completed":
                status = "cancelled"  # a cancel that came while the last lines drained
            for values in new_files:
                await conn.execute(insert(files).values(**values, expires_at=expires))
            output = next((f["id"] for f in new_files if f["id"].startswith("file-out-")), None)
            error = next((f["id"] for f in new_files if f["id"].startswith("file-err-")), None)
            await conn.execute(update(batches).where(batches.c.id == batch_id).values(
                status=status, finished_at=now, output_file_id=output, error_file_id=error,
                errors=orjson.dumps(errors).decode() if errors else None, lease_owner=None, lease_until=None))

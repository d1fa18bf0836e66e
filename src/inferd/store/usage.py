"""Usage rows and their per-day rollup: the writer's rollup deltas and the report queries.

Summaries read whole UTC days from `usage_daily` and only the partial first and last day of a
window from `usage_rows`, so a year costs a few hundred thousand small rows at most, never the
millions of calls behind them. The same queries run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable

from sqlalchemy import ColumnElement, Select, and_, func, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.expression import cast

from inferd.store.tables import api_keys, orgs, usage_daily, usage_rows

_SEP = "\x1f"
_NONE = "\x01"  # stands for NULL in the hash (PostgreSQL text cannot hold NUL)
_SUMS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "cost_usd")


def dims_hash(model: str, workspace: str, deployment: str, user_id: str | None, metadata: str | None) -> str:
    """The rollup's short key for one combination of grouping values (migration 0002 computes the same)."""
    joined = _SEP.join((model, workspace, deployment, _NONE if user_id is None else user_id,
                        _NONE if metadata is None else metadata))
    return hashlib.md5(joined.encode(), usedforsecurity=False).hexdigest()[:16]


def rollup_deltas(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a batch of new usage rows adds to `usage_daily`, one entry per (key, day, dims),
    sorted so concurrent writers lock rollup rows in the same order (no deadlocks)."""
    deltas: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        day = row["created_at"].date().isoformat()
        dims = dims_hash(row["model"], row["workspace"], row["deployment"], row["user_id"], row["metadata"])
        slot = (row["key_id"], day, dims)
        delta = deltas.get(slot)
        if delta is None:
            deltas[slot] = {"key_id": row["key_id"], "day": day, "dims": dims, "model": row["model"],
                            "workspace": row["workspace"], "deployment": row["deployment"],
                            "user_id": row["user_id"], "metadata": row["metadata"], "requests": 1,
                            **{name: row[name] for name in _SUMS}}
        else:
            delta["requests"] += 1
            for name in _SUMS:
                delta[name] += row[name]
    return [deltas[slot] for slot in sorted(deltas)]


ROLLUP_COLUMNS = ("key_id", "day", "dims", "model", "workspace", "deployment", "user_id", "metadata", "requests",
                  *_SUMS)
_ADDED = ("requests", *_SUMS)
SQLITE_ROLLUP_UPSERT = (
    f"INSERT INTO usage_daily ({', '.join(ROLLUP_COLUMNS)}) VALUES ({', '.join('?' * len(ROLLUP_COLUMNS))}) "
    "ON CONFLICT (key_id, day, dims) DO UPDATE SET "
    + ", ".join(f"{name} = usage_daily.{name} + excluded.{name}" for name in _ADDED))


def rollup_upsert(dialect: str) -> Any:
    """The SQLAlchemy upsert that adds deltas to `usage_daily` on this dialect."""
    stmt = (pg_insert if dialect == "postgresql" else sqlite_insert)(usage_daily)
    return stmt.on_conflict_do_update(
        index_elements=[usage_daily.c.key_id, usage_daily.c.day, usage_daily.c.dims],
        set_={name: usage_daily.c[name] + stmt.excluded[name] for name in _ADDED})


# --- reports ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageQuery:
    """Which rows a report covers: charged keys, a [start, end) window (naive UTC) and filters."""

    key_ids: tuple[str, ...]
    start: datetime
    end: datetime
    model: str | None = None
    workspace: str | None = None
    deployment: str | None = None
    metadata: dict[str, str] | None = None


@dataclass
class SummaryGroup:
    """The totals of one group of a summary."""

    group_value: str | None
    requests: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


SIMPLE_GROUPS = ("model", "workspace", "deployment", "key_id", "user_id")


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


class UsageRepository:
    """Reads usage rows and summaries for a set of charged keys."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._pg = engine.dialect.name == "postgresql"

    def _tag(self, column: Any, tag: str) -> ColumnElement[Any]:
        """The text value of one metadata tag of a JSON text column (NULL when absent)."""
        if self._pg:
            return func.jsonb_extract_path_text(cast(column, JSONB), tag)
        if '"' in tag:  # not expressible as a JSON path: look the key up among the object's members
            members = func.json_each(column).table_valued("key", "value")
            return select(members.c.value).where(members.c.key == tag).scalar_subquery()
        return func.json_extract(column, f'$."{tag}"')

    def _day(self, table: Any) -> ColumnElement[Any]:
        if table is usage_daily:
            return usage_daily.c.day
        if self._pg:
            return func.to_char(usage_rows.c.created_at, "YYYY-MM-DD")
        return func.substr(usage_rows.c.created_at, 1, 10)

    def _filters(self, table: Any, query: UsageQuery) -> list[ColumnElement[bool]]:
        keys = table.c.key_id == query.key_ids[0] if len(query.key_ids) == 1 else table.c.key_id.in_(query.key_ids)
        clauses: list[ColumnElement[bool]] = [keys]
        for name in ("model", "workspace", "deployment"):
            value = getattr(query, name)
            if value is not None:
                clauses.append(table.c[name] == value)
        for tag, value in (query.metadata or {}).items():
            clauses.append(self._tag(table.c.metadata, tag) == value)
        return clauses

    async def page(self, query: UsageQuery, limit: int, offset: int) -> list[dict[str, Any]]:
        """One page of rows, newest first (ties broken by id, so pages never overlap)."""
        if not query.key_ids:
            return []
        stmt = (select(usage_rows)
                .where(*self._filters(usage_rows, query), usage_rows.c.created_at >= query.start,
                       usage_rows.c.created_at < query.end)
                .order_by(usage_rows.c.created_at.desc(), usage_rows.c.id.desc()).limit(limit).offset(offset))
        async with self._engine.connect() as conn:
            return [dict(row) for row in (await conn.execute(stmt)).mappings()]

    def _grouped(self, table: Any, group: str | None, query: UsageQuery,
                 window: list[ColumnElement[bool]]) -> Select[Any]:
        requests = func.count() if table is usage_rows else func.sum(usage_daily.c.requests)
        sums = [requests, *(func.sum(table.c[name]) for name in _SUMS)]
        if group is None:
            return select(*sums).where(*self._filters(table, query), *window)
        if group == "day":
            key = self._day(table)
        elif group.startswith("metadata."):
            key = self._tag(table.c.metadata, group[len("metadata."):])
        else:
            key = table.c[group]
        return select(key, *sums).where(*self._filters(table, query), *window).group_by(key)

    async def summary(self, query: UsageQuery, group: str | None) -> list[SummaryGroup]:
        """Totals per group (`model`, `workspace`, `deployment`, `key_id`, `user_id`, `day`,
        `metadata.<tag>`, or None for one total), in no particular order."""
        if not query.key_ids:
            return []
        first_day = _midnight(query.start)
        if first_day < query.start:
            first_day += timedelta(days=1)
        last_day = _midnight(query.end)
        statements: list[Select[Any]] = []
        raw_ranges = [(query.start, query.end)]
        if first_day < last_day:  # whole days from the rollup, the ragged ends from the rows
            statements.append(self._grouped(usage_daily, group, query, [
                usage_daily.c.day >= first_day.date().isoformat(), usage_daily.c.day < last_day.date().isoformat()]))
            raw_ranges = [(query.start, first_day), (last_day, query.end)]
        for start, end in raw_ranges:
            if start < end:
                statements.append(self._grouped(usage_rows, group, query, [
                    usage_rows.c.created_at >= start, usage_rows.c.created_at < end]))
        groups: dict[str | None, SummaryGroup] = {}
        async with self._engine.connect() as conn:
            for stmt in statements:
                for row in (await conn.execute(stmt)).all():
                    value, sums = (None, row) if group is None else (row[0], row[1:])
                    if not sums[0]:
                        continue  # an aggregate over no rows
                    value = None if value is None else str(value)
                    totals = groups.setdefault(value, SummaryGroup(value))
                    totals.requests += int(sums[0])
                    totals.prompt_tokens += int(sums[1] or 0)
                    totals.cached_prompt_tokens += int(sums[2] or 0)
                    totals.completion_tokens += int(sums[3] or 0)
                    totals.cost_usd += float(sums[4] or 0.0)
        return list(groups.values())

    async def org_key_ids(self, org_slug: str) -> tuple[str, ...] | None:
        """The access key ids of an org's long-lived keys (whose rows carry them), or None when no such org."""
        async with self._engine.connect() as conn:
            org_id = (await conn.execute(select(orgs.c.id).where(orgs.c.slug == org_slug))).scalar()
            if org_id is None:
                return None
            found = await conn.execute(select(api_keys.c.access_key_id).where(
                api_keys.c.org_id == org_id, api_keys.c.type != "user"))
            return tuple(found.scalars())


def order_groups(groups: list[SummaryGroup]) -> list[SummaryGroup]:
    """Groups by cost, highest first; ties by requests, then value, so pages are stable."""
    return sorted(groups, key=lambda g: (-g.cost_usd, -g.requests, g.group_value is None, g.group_value or ""))

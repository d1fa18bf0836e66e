"""Usage rows and their rollup (per UTC hour, day and month): the writer's deltas and the reports.

Summaries read whole months, days and hours from `usage_rollup` and only the ragged minutes at
either end of a window from `usage_rows`, so a year costs some thousands of small rows, never
the millions of calls behind them. The same queries run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Iterable

import orjson
from sqlalchemy import ColumnElement, Select, case, func, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.expression import cast

from inferd.store.tables import api_keys, orgs, teams, usage_rollup, usage_rows

_SEP = "\x1f"
_NONE = "\x01"  # stands for NULL in the hash (PostgreSQL text cannot hold NUL)
_SUMS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "cost_usd")
# What the rollup adds beside the sums of the rows' own columns (since 0015): the response-cache
# hits (rows with `cache_hit`) and the cost they saved.
_HITS = ("cache_hits", "saved_usd")


def _hits(row: dict[str, Any]) -> tuple[int, float]:
    """A row's `_HITS`: (1 when it is a cache hit, else 0; its saved cost). A row journaled before
    0015 has neither."""
    return (1 if row.get("cache_hit") else 0), float(row.get("saved_usd") or 0.0)


@lru_cache(maxsize=4096)  # a key sees few distinct combinations; the hot path skips the hashing
def dims_hash(model: str, workspace: str, deployment: str, metadata: str | None) -> str:
    """The rollups' short key for one combination of grouping values."""
    joined = _SEP.join((model, workspace, deployment, _NONE if metadata is None else metadata))
    return hashlib.md5(joined.encode(), usedforsecurity=False).hexdigest()[:16]


def hour_period(moment: datetime) -> str:
    """YYYY-MM-DDTHH: an hour's period; its first 10 and 7 characters name its day and month."""
    return f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}"


def _period(span: str, moment: datetime) -> str:
    return hour_period(moment)[:{"hour": 13, "day": 10, "month": 7}[span]]


def rollup_deltas(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a batch of new usage rows adds to `usage_rollup`: one entry per (key, hour, dims), per
    (key, day, dims) and per (key, month, dims), sorted so concurrent writers lock rollup rows in
    one order (no deadlocks)."""
    deltas: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for row in rows:
        hour = hour_period(row["created_at"])
        dims = dims_hash(row["model"], row["workspace"], row["deployment"], row["metadata"])
        for span, period in (("day", hour[:10]), ("hour", hour), ("month", hour[:7])):
            delta = deltas.get((row["key_id"], span, period, dims))
            if delta is None:
                deltas[(row["key_id"], span, period, dims)] = {
                    "key_id": row["key_id"], "span": span, "period": period, "dims": dims, "model": row["model"],
                    "workspace": row["workspace"], "deployment": row["deployment"], "metadata": row["metadata"],
                    "requests": 1, **{name: row[name] for name in _SUMS}, **dict(zip(_HITS, _hits(row)))}
            else:
                delta["requests"] += 1
                for name in _SUMS:
                    delta[name] += row[name]
                for name, value in zip(_HITS, _hits(row)):
                    delta[name] += value
    return [deltas[slot] for slot in sorted(deltas)]


def rollup_values(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """`rollup_deltas` as parameter tuples in ROLLUP_WRITES order; a lone row (the common commit
    when traffic is light) takes a short path."""
    if len(rows) != 1:
        return [tuple(delta[name] for name in ROLLUP_WRITES) for delta in rollup_deltas(rows)]
    row = rows[0]
    hour = hour_period(row["created_at"])
    values = (dims_hash(row["model"], row["workspace"], row["deployment"], row["metadata"]), row["model"],
              row["workspace"], row["deployment"], row["metadata"], 1, row["prompt_tokens"],
              row["cached_prompt_tokens"], row["completion_tokens"], row["cost_usd"], *_hits(row))
    return [(row["key_id"], "day", hour[:10], *values), (row["key_id"], "hour", hour, *values),
            (row["key_id"], "month", hour[:7], *values)]


# The rollup's columns as revision 0002 made them: its backfill inserts these (a revision is history,
# so what it reads here may not grow); the writers write them and those added since (ROLLUP_WRITES).
ROLLUP_COLUMNS = ("key_id", "span", "period", "dims", "model", "workspace", "deployment", "metadata", "requests",
                  *_SUMS)
_ADDED = ("requests", *_SUMS, *_HITS)
ROLLUP_WRITES = (*ROLLUP_COLUMNS, *_HITS)
SQLITE_ROLLUP_UPSERT = (
    f"INSERT INTO usage_rollup ({', '.join(ROLLUP_WRITES)}) VALUES ({', '.join('?' * len(ROLLUP_WRITES))}) "
    "ON CONFLICT (key_id, span, period, dims) DO UPDATE SET "
    + ", ".join(f"{name} = usage_rollup.{name} + excluded.{name}" for name in _ADDED))


def rollup_upsert(dialect: str) -> Any:
    """The SQLAlchemy upsert that adds `rollup_deltas` to `usage_rollup` on this dialect (executemany)."""
    stmt = (pg_insert if dialect == "postgresql" else sqlite_insert)(usage_rollup)
    return stmt.on_conflict_do_update(
        index_elements=[usage_rollup.c.key_id, usage_rollup.c.span, usage_rollup.c.period, usage_rollup.c.dims],
        set_={name: usage_rollup.c[name] + stmt.excluded[name] for name in _ADDED})


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
    user_id: str | None = None  # not a rollup dimension: a query with it reads rows only
    team_id: int | None = None  # nor is the row's team (issue 28): rows only too


@dataclass
class SummaryGroup:
    """The totals of one group of a summary."""

    group_value: str | None
    requests: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0  # answered from the response cache (their cost is 0)
    saved_usd: float = 0.0  # what those hits first cost


SEEK_FROM_OFFSET = 1000  # deep pages with filters no index covers skip whole periods by their rollup counts


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _ceil_day(moment: datetime) -> datetime:
    day = _midnight(moment)
    return day if day == moment else day + timedelta(days=1)


def _month_start(day: datetime) -> datetime:
    return day.replace(day=1)


def _next_month(day: datetime) -> datetime:
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)


def _floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _ceil_hour(moment: datetime) -> datetime:
    hour = _floor_hour(moment)
    return hour if hour == moment else hour + timedelta(hours=1)


_FINER = {"month": "day", "day": "hour"}


def _step_back(span: str, moment: datetime) -> datetime:
    """The start of the `span` period that ends at `moment` (a period boundary)."""
    if span == "hour":
        return moment - timedelta(hours=1)
    if span == "day":
        return moment - timedelta(days=1)
    return _month_start(moment - timedelta(days=1))


def _ranges(start: datetime, end: datetime, months: bool) -> list[tuple[str, datetime, datetime]]:
    """Split [start, end) into the coarsest rollup periods that fit, as (source, from, to): whole
    months (when `months`), whole days, whole hours (`month`, `day`, `hour`: the rollup) and the
    ragged minutes at either end (`rows`)."""
    first_hour, last_hour = _ceil_hour(start), _floor_hour(end)
    if first_hour >= last_hour:
        return [("rows", start, end)]
    parts = [("rows", start, first_hour), ("rows", last_hour, end)]
    first_day, last_day = _ceil_day(first_hour), _midnight(last_hour)
    if first_day >= last_day:
        parts.append(("hour", first_hour, last_hour))
    else:
        parts += [("hour", first_hour, first_day), ("hour", last_day, last_hour)]
        first_month = first_day if first_day.day == 1 else _next_month(first_day)
        last_month = _month_start(last_day)
        if months and first_month < last_month:
            parts += [("month", first_month, last_month), ("day", first_day, first_month),
                      ("day", last_month, last_day)]
        else:
            parts.append(("day", first_day, last_day))
    return [(source, a, b) for source, a, b in parts if a < b]


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

    def _filters(self, table: Any, query: UsageQuery, sql_metadata: bool) -> list[ColumnElement[bool]]:
        keys = table.c.key_id == query.key_ids[0] if len(query.key_ids) == 1 else table.c.key_id.in_(query.key_ids)
        clauses: list[ColumnElement[bool]] = [keys]
        for name in ("model", "workspace", "deployment", "user_id", "team_id"):
            value = getattr(query, name)
            if value is not None:
                clauses.append(table.c[name] == value)
        if sql_metadata:
            for tag, value in (query.metadata or {}).items():
                clauses.append(self._tag(table.c.metadata, tag) == value)
        return clauses

    async def page(self, query: UsageQuery, limit: int, offset: int) -> list[dict[str, Any]]:
        """One page of rows, newest first (ties broken by id, so pages never overlap).

        The offset is walked over ids alone, which the page indexes cover (an index-only scan),
        and only the page's own rows are read whole. Filters no index covers (metadata,
        deployment) would make a deep offset read every skipped row, so whole months, days and
        hours are skipped by their rollup counts first and at most one hour of rows is walked."""
        if not query.key_ids:
            return []
        newest_first = (usage_rows.c.created_at.desc(), usage_rows.c.id.desc())
        async with self._engine.connect() as conn:
            end = query.end
            if offset >= SEEK_FROM_OFFSET and (query.metadata or query.deployment is not None) \
                    and query.user_id is None and query.team_id is None:  # the rollup knows no users, no teams
                end, offset = await self._seek(conn, query, offset)
            ids = (select(usage_rows.c.id)
                   .where(*self._filters(usage_rows, query, True), usage_rows.c.created_at >= query.start,
                          usage_rows.c.created_at < end)
                   .order_by(*newest_first).limit(limit).offset(offset)).subquery()
            # The team's current name beside the row's team id (NULL: no team, or a team since deleted).
            stmt = (select(usage_rows, teams.c.name.label("team"))
                    .join(ids, usage_rows.c.id == ids.c.id)
                    .outerjoin(teams, teams.c.id == usage_rows.c.team_id).order_by(*newest_first))
            return [dict(row) for row in (await conn.execute(stmt)).mappings()]

    async def _seek(self, conn: AsyncConnection, query: UsageQuery, offset: int) -> tuple[datetime, int]:
        """A window end and a smaller offset that name the same page, found by counting matching
        rows in the rollup, newest first, by month, then day, then hour, rather than walking
        them: the page query then walks at most one hour of rows."""
        skipped = 0
        for source, start, end in sorted(_ranges(query.start, query.end, months=True), key=lambda part: part[2],
                                         reverse=True):
            if source == "rows":
                if start == query.start:  # the oldest ragged minutes: the page query walks them
                    return end, offset - skipped
                count = int(await conn.scalar(select(func.count()).select_from(usage_rows).where(
                    *self._filters(usage_rows, query, True), usage_rows.c.created_at >= start,
                    usage_rows.c.created_at < end)) or 0)
                if offset < skipped + count:
                    return end, offset - skipped
                skipped += count
                continue
            found, within = await self._walk(conn, query, source, start, end, offset - skipped)
            if found is not None:
                return found, within
            skipped += within
        return query.start, 0

    async def _walk(self, conn: AsyncConnection, query: UsageQuery, span: str, start: datetime, end: datetime,
                    remaining: int) -> tuple[datetime | None, int]:
        """Within [start, end) of whole `span` periods, newest first: (the end of the hour holding
        the `remaining`-th matching row, how many to skip there), or (None, matching rows in all)."""
        counts: dict[str, int] = {}
        wanted = list((query.metadata or {}).items())
        for row in (await conn.execute(self._grouped(span, span, query, start, end))).all():
            if wanted:
                tags = orjson.loads(row[1]) if row[1] else {}
                if any(tags.get(k) != v for k, v in wanted):
                    continue
            counts[row[0]] = counts.get(row[0], 0) + int(row[-7] or 0)
        passed, moment = 0, end
        while moment > start:
            earlier = _step_back(span, moment)
            count = counts.get(_period(span, earlier), 0)
            if remaining < passed + count:
                if span == "hour":
                    return moment, remaining - passed
                return await self._walk(conn, query, _FINER[span], earlier, moment, remaining - passed)
            passed += count
            moment = earlier
        return None, passed

    def _grouped(self, source: str, group: str | None, query: UsageQuery, start: datetime,
                 end: datetime) -> Select[Any]:
        """Sums over one source and range, grouped by the group's column and, when tags matter, by
        the metadata text: there are few distinct tag sets, so tags are read once each in Python
        rather than parsed as JSON for every row."""
        table: Any = usage_rows if source == "rows" else usage_rollup
        if source == "rows":
            window = [usage_rows.c.created_at >= start, usage_rows.c.created_at < end]
            requests = func.count()
        else:
            window = [usage_rollup.c.span == source, usage_rollup.c.period >= _period(source, start),
                      usage_rollup.c.period < _period(source, end)]
            requests = func.sum(usage_rollup.c.requests)
        keys: list[Any] = []
        if group in ("hour", "month"):  # the seek's buckets, from that span's rollup rows only
            keys.append(usage_rollup.c.period)
        elif group == "day":
            if source == "day":
                keys.append(usage_rollup.c.period)
            elif source == "hour":
                keys.append(func.substr(usage_rollup.c.period, 1, 10))
            elif self._pg:
                keys.append(func.to_char(usage_rows.c.created_at, "YYYY-MM-DD"))
            else:
                keys.append(func.substr(usage_rows.c.created_at, 1, 10))
        elif group == "team":  # rows only: the team the row was charged under, by id (named later)
            keys.append(usage_rows.c.team_id)
        elif group is not None and not group.startswith("metadata."):
            keys.append(table.c[group])
        if query.metadata or (group or "").startswith("metadata."):
            keys.append(table.c.metadata)
        sums = [requests, *(func.sum(table.c[name]) for name in _SUMS)]
        if source == "rows":
            sums += [func.sum(case((usage_rows.c.cache_hit, 1), else_=0)), func.sum(usage_rows.c.saved_usd)]
        else:
            sums += [func.sum(usage_rollup.c[name]) for name in _HITS]
        stmt = select(*keys, *sums).where(*self._filters(table, query, False), *window)
        return stmt.group_by(*keys) if keys else stmt

    async def summary(self, query: UsageQuery, group: str | None) -> list[SummaryGroup]:
        """Totals per group (`model`, `workspace`, `deployment`, `key_id`, `user_id`, `team`, `day`,
        `metadata.<tag>`, or None for one total), in no particular order. Whole months, days and
        hours come from the rollup, the ragged minutes at either end from the rows (user_id and team,
        not rollup dimensions: rows only).

        `team` groups by the team each row was charged under, not the key's team now: a key moved
        between teams leaves its history with the old one. The rollup is kept per key, so it cannot
        tell those apart; the rows can (the same trade-off as user_id)."""
        if not query.key_ids:
            return []
        if group in ("user_id", "team") or query.user_id is not None or query.team_id is not None:
            parts = [("rows", query.start, query.end)]
        else:
            parts = _ranges(query.start, query.end, months=group != "day")
        tag = group[len("metadata."):] if group and group.startswith("metadata.") else None
        wanted = list((query.metadata or {}).items())
        tags_of: dict[str | None, dict[str, Any]] = {}
        groups: dict[str | None, SummaryGroup] = {}
        async with self._engine.connect() as conn:
            for source, start, end in parts:
                for row in (await conn.execute(self._grouped(source, group, query, start, end))).all():
                    values = list(row)
                    sums = values[-7:]
                    if not sums[0]:
                        continue  # an aggregate over no rows
                    value = None if group is None or tag is not None else values[0]
                    if wanted or tag is not None:
                        text = values[-8]
                        tags = tags_of.get(text)
                        if tags is None:
                            tags = tags_of[text] = orjson.loads(text) if text else {}
                        if any(tags.get(k) != v for k, v in wanted):
                            continue
                        if tag is not None:
                            value = tags.get(tag)
                    value = None if value is None else str(value)
                    totals = groups.setdefault(value, SummaryGroup(value))
                    totals.requests += int(sums[0])
                    totals.prompt_tokens += int(sums[1] or 0)
                    totals.cached_prompt_tokens += int(sums[2] or 0)
                    totals.completion_tokens += int(sums[3] or 0)
                    totals.cost_usd += float(sums[4] or 0.0)
                    totals.cache_hits += int(sums[5] or 0)
                    totals.saved_usd += float(sums[6] or 0.0)
            if group == "team":
                return await _named(conn, groups)
        return list(groups.values())

    async def team_id(self, org_slug: str, name: str) -> int | None:
        """The id of the org's team called `name`, or None when it has none."""
        async with self._engine.connect() as conn:
            return (await conn.execute(select(teams.c.id).join(orgs, orgs.c.id == teams.c.org_id).where(
                orgs.c.slug == org_slug, teams.c.name == name))).scalar()

    async def org_key_ids(self, org_slug: str) -> tuple[str, ...] | None:
        """The access key ids of an org's long-lived keys (whose rows carry them), or None when no such org."""
        async with self._engine.connect() as conn:
            org_id = (await conn.execute(select(orgs.c.id).where(orgs.c.slug == org_slug))).scalar()
            if org_id is None:
                return None
            found = await conn.execute(select(api_keys.c.access_key_id).where(
                api_keys.c.org_id == org_id, api_keys.c.type != "user"))
            return tuple(found.scalars())


async def _named(conn: AsyncConnection, by_id: dict[str | None, SummaryGroup]) -> list[SummaryGroup]:
    """Team groups keyed by team id, renamed to the teams' current names. A caller sees one org's
    rows, whose team names are unique; a team since deleted has no name and joins the null group."""
    ids = [int(value) for value in by_id if value is not None]
    names: dict[int, str] = {}
    if ids:
        found = await conn.execute(select(teams.c.id, teams.c.name).where(teams.c.id.in_(ids)))
        names = {int(row[0]): str(row[1]) for row in found.all()}
    merged: dict[str | None, SummaryGroup] = {}
    for value, totals in by_id.items():
        name = None if value is None else names.get(int(value))
        into = merged.setdefault(name, SummaryGroup(name))
        into.requests += totals.requests
        into.prompt_tokens += totals.prompt_tokens
        into.cached_prompt_tokens += totals.cached_prompt_tokens
        into.completion_tokens += totals.completion_tokens
        into.cost_usd += totals.cost_usd
        into.cache_hits += totals.cache_hits
        into.saved_usd += totals.saved_usd
    return list(merged.values())


def order_groups(groups: list[SummaryGroup]) -> list[SummaryGroup]:
    """Groups by cost, highest first; ties by requests, then value, so pages are stable."""
    return sorted(groups, key=lambda g: (-g.cost_usd, -g.requests, g.group_value is None, g.group_value or ""))

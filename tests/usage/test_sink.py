"""The usage writes: a batch of many rows of several keys, hours and tags lands whole through the
group commit's sink, with its rollup and spend; PostgreSQL's journal fold statement writes the same."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime

import asyncpg
import pytest
from sqlalchemy import select

from inferd.metering.group_commit import usage_sink
from inferd.store.db import create_engine, migrate, pg_dsn
from inferd.store.tables import spend as spend_days, usage_rollup, usage_rows
from inferd.store.usage_write import PG_JOURNAL_FOLD, pg_usage_arguments, spend_amounts
from tests.harness import Backend
from tests.usage.conftest import usage_row


def test_one_commit_writes_rows_rollup_and_spend(backend: Backend) -> None:
    first, second = (f"SINK{uuid.uuid4().hex[:12].upper()}:s" for _ in range(2))
    rows = [usage_row(first, datetime(2026, 3, 1, 10, 5), cost=0.25, metadata={"team": "a"}),
            usage_row(first, datetime(2026, 3, 1, 10, 50), cost=0.5, metadata={"team": "a"}),
            usage_row(first, datetime(2026, 3, 1, 11, 1), cost=1.0, prompt=7, completion=0),
            usage_row(second, datetime(2026, 4, 2, 0, 0), cost=2.0, model="m-two", user_id="9")]
    ids = [first.split(":")[0], second.split(":")[0]]

    async def go() -> tuple[list, list, list]:
        engine = create_engine(backend.database_url)
        sink = usage_sink(engine)
        try:
            await migrate(engine)
            await sink.commit(rows, spend_amounts(rows))
            await sink.commit(rows[:1], spend_amounts(rows[:1]))  # a second commit adds to the same rollup rows
            async with engine.connect() as conn:
                stored = (await conn.execute(select(usage_rows).where(usage_rows.c.key_id.in_(ids)))).mappings().all()
                rollup = (await conn.execute(select(usage_rollup).where(usage_rollup.c.key_id.in_(ids)))
                          ).mappings().all()
                spend = (await conn.execute(select(spend_days).where(spend_days.c.scope == "key",
                                                                     spend_days.c.owner.in_(ids)))).mappings().all()
            return list(stored), list(rollup), list(spend)
        finally:
            await sink.close()
            await engine.dispose()

    stored, rollup, spend = asyncio.run(go())
    assert len(stored) == 5
    assert sorted((r["key_id"], r["created_at"], r["cost_usd"], r["user_id"]) for r in stored) == sorted(
        (r["key_id"], r["created_at"], r["cost_usd"], r["user_id"]) for r in rows + rows[:1])
    assert {(s["owner"], s["day"]): s["spend_usd"] for s in spend} == {  # per key and day
        (ids[0], "2026-03-01"): 2.0, (ids[1], "2026-04-02"): 2.0}
    by_slot = {(r["key_id"], r["span"], r["period"], r["metadata"]): r for r in rollup}
    tagged = by_slot[(ids[0], "hour", "2026-03-01T10", '{"team":"a"}')]
    assert (tagged["requests"], tagged["cost_usd"], tagged["prompt_tokens"]) == (3, 1.0, 30)
    assert by_slot[(ids[0], "hour", "2026-03-01T11", None)]["requests"] == 1
    month = [r for r in rollup if r["key_id"] == ids[0] and r["span"] == "month"]
    assert sum(r["requests"] for r in month) == 4 and sum(r["cost_usd"] for r in month) == 2.0
    assert by_slot[(ids[1], "day", "2026-04-02", None)]["model"] == "m-two"


def test_a_journal_fold_writes_what_the_group_commit_writes(backend: Backend) -> None:
    """PostgreSQL's journal fold is one hand-written statement (`PG_JOURNAL_FOLD`): it must write
    what SQLAlchemy's writes write for the same rows, zero-cost rows (no spend) included, and a
    second fold of the same bytes must write nothing."""
    if not backend.database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's fold statement")
    committed, folded = (f"SINK{uuid.uuid4().hex[:12].upper()}:s" for _ in range(2))
    journal = f"test/{uuid.uuid4().hex}.jsonl"

    def rows_of(key: str) -> list[dict]:
        return [usage_row(key, datetime(2026, 3, 1, 10, 5), cost=0.25, metadata={"team": "a"}),
                usage_row(key, datetime(2026, 3, 1, 10, 50), cost=0.5, metadata={"team": "a"}, user_id="7"),
                usage_row(key, datetime(2026, 3, 31, 23, 59), cost=0.0, prompt=3, completion=0),
                usage_row(key, datetime(2026, 4, 1, 0, 0), cost=1.5, model="m-two", workspace="ws2")]

    async def go() -> dict[str, tuple[list, list, list]]:
        engine = create_engine(backend.database_url)
        sink = usage_sink(engine)
        raw = await asyncpg.connect(pg_dsn(engine.url))
        try:
            await migrate(engine)
            await sink.commit(rows_of(committed), spend_amounts(rows_of(committed)))
            rows = rows_of(folded)
            arguments = pg_usage_arguments(rows, spend_amounts(rows))
            assert await raw.fetchval(PG_JOURNAL_FOLD, journal, 0, 400, *arguments) == 1
            assert await raw.fetchval(PG_JOURNAL_FOLD, journal, 0, 400, *arguments) == 0  # claimed already
            assert await raw.fetchval("SELECT folded FROM usage_journal WHERE name = $1", journal) == 400
            await raw.execute("DELETE FROM usage_journal WHERE name = $1", journal)
            found = {}
            async with engine.connect() as conn:
                for key in (committed, folded):
                    key_id = key.split(":")[0]
                    stored = (await conn.execute(select(usage_rows).where(usage_rows.c.key_id == key_id))).mappings()
                    rollup = (await conn.execute(select(usage_rollup).where(usage_rollup.c.key_id == key_id))
                              ).mappings()
                    spend = (await conn.execute(select(spend_days).where(spend_days.c.scope == "key",
                                                                         spend_days.c.owner == key_id))).mappings()
                    found[key] = (sorted((tuple(v for k, v in r.items() if k not in ("id", "key_id")) for r in stored),
                                         key=repr),
                                  sorted((tuple(v for k, v in r.items() if k != "key_id") for r in rollup), key=repr),
                                  sorted((s["day"], s["spend_usd"]) for s in spend))
            return found
        finally:
            await raw.close()
            await sink.close()
            await engine.dispose()

    found = asyncio.run(go())
    assert found[committed] == found[folded]
    stored, rollup, spend = found[folded]
    assert len(stored) == 4 and len(rollup) == 9  # an hour, a day and a month for each of 3 dims
    assert spend == [("2026-03-01", 0.75), ("2026-04-01", 1.5)]  # the zero-cost row adds no spend row

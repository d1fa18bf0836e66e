"""Migration 0002 folds usage rows written before it into the rollup."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from inferd.store.db import create_engine, migrate
from inferd.store.tables import usage_rows
from inferd.store.usage import UsageQuery, UsageRepository
from tests.harness import Backend, scratch_database, upgrade_to
from tests.usage.conftest import usage_row



def test_existing_rows_are_rolled_up(tmp_path: Path, backend: Backend) -> None:
    key = "IFDKOLDROWS:secret"
    rows = [usage_row(key, datetime(2025, 1, 30, 22) + timedelta(hours=5 * i), model=("a", "b")[i % 2], prompt=i,
                      metadata={"env": "prod"} if i % 3 else None) for i in range(40)]

    async def go(url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade_to("0001"))
                await conn.execute(insert(usage_rows), rows)
            await migrate(engine)
            repo = UsageRepository(engine)
            query = UsageQuery(key_ids=(key.split(":")[0],), start=datetime(2025, 1, 1), end=datetime(2025, 3, 1))
            by_model = {g.group_value: (g.requests, g.prompt_tokens) for g in await repo.summary(query, "model")}
            assert by_model == {"a": (20, sum(range(0, 40, 2))), "b": (20, sum(range(1, 40, 2)))}
            by_tag = {g.group_value: g.requests for g in await repo.summary(query, "metadata.env")}
            assert by_tag == {"prod": 26, None: 14}
            start, end = datetime(2025, 1, 31, 3, 30), datetime(2025, 2, 5, 7, 10)  # hours and days too
            inside = [r for r in rows if start <= r["created_at"] < end]
            total = await repo.summary(UsageQuery(key_ids=query.key_ids, start=start, end=end), None)
            assert [(g.requests, g.prompt_tokens) for g in total] == [
                (len(inside), sum(r["prompt_tokens"] for r in inside))]
        finally:
            await engine.dispose()

    with scratch_database(backend, tmp_path) as url:
        asyncio.run(go(url))

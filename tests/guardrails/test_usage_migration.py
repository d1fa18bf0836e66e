"""Migration 0016 adds the usage row's `guardrail`: rows written before it keep every value and have
none; a row written after it names the output guardrail that withheld its reply; the downgrade drops
the column and keeps the rows."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import insert, inspect, text
from sqlalchemy.engine import Connection

from inferd.store.db import create_engine, migrate
from inferd.store.tables import usage_rows
from tests.harness import Backend, scratch_database, upgrade_to
from tests.usage.conftest import usage_row


def _downgrade_to(revision: str) -> Any:
    def run(connection: Connection) -> None:
        config = Config()
        config.set_main_option("script_location", "inferd.store:migrations")
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

    return run


def _columns(connection: Connection) -> list[str]:
    return [column["name"] for column in inspect(connection).get_columns("usage_rows")]


def test_usage_rows_gain_and_lose_the_guardrail_column(tmp_path: Path, backend: Backend) -> None:
    key = "IFDKMIGRATED0016:secret"
    before = usage_row(key, datetime(2026, 3, 1, 10), cost=0.5)
    before.pop("guardrail", None)

    async def go(url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade_to("0015"))
                assert "guardrail" not in await conn.run_sync(_columns)
                await conn.execute(insert(usage_rows).values(**before))
            await migrate(engine)
            async with engine.begin() as conn:
                assert "guardrail" in await conn.run_sync(_columns)
                after = {**usage_row(key, datetime(2026, 3, 1, 11), cost=0.25), "guardrail": "no-cards"}
                await conn.execute(insert(usage_rows).values(**after))
                rows = (await conn.execute(text(
                    "SELECT cost_usd, guardrail FROM usage_rows WHERE key_id = :k ORDER BY created_at"),
                    {"k": key.split(":")[0]})).all()
            assert [tuple(r) for r in rows] == [(0.5, None), (0.25, "no-cards")]
            async with engine.begin() as conn:
                await conn.run_sync(_downgrade_to("0015"))
                assert "guardrail" not in await conn.run_sync(_columns)
                count = (await conn.execute(text("SELECT count(*) FROM usage_rows"))).scalar_one()
            assert count == 2
            await migrate(engine)  # and up again
        finally:
            await engine.dispose()

    with scratch_database(backend, tmp_path) as url:
        asyncio.run(go(url))

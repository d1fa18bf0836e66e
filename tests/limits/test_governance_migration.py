"""Migration 0012 upgrades a database of keys with monthly budgets: spend moves from per key and
month to per owner (key, org) and day, summed from the usage rows; keys keep their budgets and
rpm (a NULL period is the spec's month); the downgrade puts the monthly sums back."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import insert, text
from sqlalchemy.engine import Connection

from inferd.auth.key_lookup import KeyLookup
from inferd.store.db import create_engine, migrate, utcnow
from inferd.store.key_limits import Budget, Window
from inferd.store.tables import api_keys, orgs, usage_rows
from tests.harness import Backend, scratch_database, upgrade_to
from tests.usage.conftest import usage_row


def _downgrade_to(revision: str) -> Any:
    def run(connection: Connection) -> None:
        config = Config()
        config.set_main_option("script_location", "inferd.store:migrations")
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

    return run


def test_keys_keep_their_budgets_and_spend_moves_to_days(tmp_path: Path, backend: Backend) -> None:
    key = "IFDKMIGRATED0012:secret"
    rows = [usage_row(key, datetime(2026, 3, 1, 10), cost=0.5), usage_row(key, datetime(2026, 3, 1, 23), cost=0.25),
            usage_row(key, datetime(2026, 3, 2, 1), cost=1.0), usage_row(key, datetime(2026, 4, 1, 0), cost=2.0),
            usage_row(key, datetime(2026, 4, 1, 1), cost=0.0)]

    async def go(url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade_to("0011"))
                org_id = (await conn.execute(insert(orgs).values(
                    slug="usage-tests", allowed_models="*", file_attachments=True, web_search=False,
                    created_at=utcnow()))).inserted_primary_key[0]
                await conn.execute(insert(api_keys).values(
                    access_key_id=key.split(":")[0], secret_hash="0" * 64, type="application", org_id=org_id,
                    budget_usd=10.0, rpm=60, created_at=utcnow()))
                await conn.execute(insert(usage_rows), rows)
                await conn.execute(text("INSERT INTO key_spend (key_id, month, spend_usd) VALUES "
                                        "(:k, '2026-03', 1.75), (:k, '2026-04', 2.0)"), {"k": key.split(":")[0]})
            await migrate(engine)
            async with engine.connect() as conn:
                days = {tuple(r[:3]): r[3] for r in await conn.execute(text(
                    "SELECT scope, owner, day, spend_usd FROM spend ORDER BY scope, day"))}
            owner = key.split(":")[0]
            assert days == {("key", owner, "2026-03-01"): 0.75, ("key", owner, "2026-03-02"): 1.0,
                            ("key", owner, "2026-04-01"): 2.0, ("org", "usage-tests", "2026-03-01"): 0.75,
                            ("org", "usage-tests", "2026-03-02"): 1.0, ("org", "usage-tests", "2026-04-01"): 2.0}
            record = await KeyLookup(engine).lookup(owner)
            assert record is not None and record.budget_usd == 10.0 and record.rpm == 60
            assert record.budgets == (Budget("key", owner, owner, 10.0, "month"),)
            assert record.windows == (Window("key", owner, 60, None),)
            async with engine.begin() as conn:
                await conn.run_sync(_downgrade_to("0011"))
            async with engine.connect() as conn:
                months = {(r[0], r[1]): r[2] for r in await conn.execute(text(
                    "SELECT key_id, month, spend_usd FROM key_spend"))}
            assert months == {(owner, "2026-03"): 1.75, (owner, "2026-04"): 2.0}
            await migrate(engine)  # and up again
        finally:
            await engine.dispose()

    with scratch_database(backend, tmp_path) as url:
        asyncio.run(go(url))

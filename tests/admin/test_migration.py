"""Migration 0008 adds the audit log beside existing data, and its downgrade removes it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, insert, select
from sqlalchemy.engine import Connection

from inferd.store.audit import AuditEntry, AuditLog, write_entry
from inferd.store.db import create_engine, migrate, utcnow
from inferd.store.tables import orgs
from tests.harness import Backend, scratch_database, upgrade_to


def _downgrade_to(revision: str) -> Callable[[Connection], None]:
    def run(connection: Connection) -> None:
        config = Config()
        config.set_main_option("script_location", "inferd.store:migrations")
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

    return run


def test_audit_log_up_and_down(tmp_path: Path, backend: Backend) -> None:
    async def go(url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade_to("0007"))
                org_id = (await conn.execute(insert(orgs).values(slug="before-0008", allowed_models="*",
                                                                 file_attachments=True, web_search=False,
                                                                 created_at=utcnow()))).inserted_primary_key[0]
            await migrate(engine)
            async with engine.begin() as conn:
                await write_entry(conn, org_id, AuditEntry("cli", "org.update", "before-0008", {"web_search": True}))
            records, more = await AuditLog(engine).page(org_id, 10, None)
            assert [(r.actor, r.action, r.target, r.details) for r in records] == [
                ("cli", "org.update", "before-0008", {"web_search": True})] and not more
            async with engine.begin() as conn:
                await conn.run_sync(_downgrade_to("0007"))
                tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
                assert "audit_log" not in tables
                assert (await conn.execute(select(orgs.c.slug))).scalars().all() == ["before-0008"]
        finally:
            await engine.dispose()

    with scratch_database(backend, tmp_path) as url:
        asyncio.run(go(url))

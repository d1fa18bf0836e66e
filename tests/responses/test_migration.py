"""Migration 0009 adds the stored responses beside existing data, and its downgrade removes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from inferd.store.db import create_engine, migrate
from inferd.store.responses import ResponseRepository, StoredResponse
from tests.harness import Backend, scratch_database, upgrade_to


def _downgrade_to_0008(connection: Connection) -> None:
    config = Config()
    config.set_main_option("script_location", "inferd.store:migrations")
    config.attributes["connection"] = connection
    command.downgrade(config, "0008")


def test_responses_table_up_and_down(tmp_path: Path, backend: Backend) -> None:
    async def go(url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade_to("0008"))
            await migrate(engine)
            store = ResponseRepository(engine)
            await store.save(StoredResponse("resp_1", "K1", [{"type": "message", "role": "user", "content": "é"}],
                                            {"id": "resp_1", "output": []}))
            await store.close()
            stored = await store.get("resp_1", "K1")
            assert stored is not None and stored.input_items[0]["content"] == "é"
            assert await store.get("resp_1", "K2") is None
            async with engine.begin() as conn:
                await conn.run_sync(_downgrade_to_0008)
                tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
                assert "responses" not in tables and "audit_log" in tables
        finally:
            await engine.dispose()

    with scratch_database(backend, tmp_path) as url:
        asyncio.run(go(url))

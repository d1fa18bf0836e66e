"""Migration 0009 adds the stored responses beside existing data, and its downgrade removes it;
0011 chains them (rows stored whole still read), and its downgrade stores them whole again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

import orjson
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from inferd.store.db import create_engine, migrate, utcnow
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


def _downgrade_to(revision: str) -> Callable[[Connection], None]:
    def run(connection: Connection) -> None:
        config = Config()
        config.set_main_option("script_location", "inferd.store:migrations")
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

    return run


def _said(text: str) -> dict[str, Any]:
    return {"id": f"resp_{text}", "object": "response", "output": [
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": text, "annotations": []}]}]}


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def test_0011_reads_rows_stored_whole_and_its_downgrade_writes_conversations_back(tmp_path: Path,
                                                                                 backend: Backend) -> None:
    """A row stored at 0010 (the whole conversation in it) starts a chain at 0011; downgraded, every
    chained row holds its whole conversation again and hidden rows are gone."""
    old_table = sa.table("responses", sa.column("id"), sa.column("key_id"), sa.column("created_at", sa.DateTime()),
                         sa.column("input_items"), sa.column("response"))

    async def go(url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade_to("0010"))
                await conn.execute(sa.insert(old_table).values(
                    id="resp_old", key_id="K1", created_at=utcnow(), input_items=orjson.dumps(
                        [_user("q1"), {"type": "message", "role": "assistant", "content": "a1"}, _user("q2")]).decode(),
                    response=orjson.dumps(_said("a2")).decode()))
            await migrate(engine)
            store = ResponseRepository(engine)
            chain = await store.chain("resp_old", "K1")
            assert [(row.id, row.previous_id) for row in chain] == [("resp_old", None)]
            await store.save(StoredResponse("resp_b", "K1", [_user("q3")], _said("a3"), "resp_old"))
            await store.save(StoredResponse("resp_c", "K1", [_user("q4")], _said("a4"), "resp_b"))
            await store.close()
            assert await store.delete("resp_b", "K1")  # continued by resp_c: hidden, kept
            assert [row.id for row in await store.chain("resp_c", "K1")] == ["resp_c", "resp_b", "resp_old"]
            async with engine.begin() as conn:
                await conn.run_sync(_downgrade_to("0010"))
                rows = {row.id: orjson.loads(row.input_items) for row in await conn.execute(
                    sa.text("SELECT id, input_items FROM responses"))}
                columns = await conn.run_sync(lambda sync: [c["name"] for c in inspect(sync).get_columns("responses")])
            assert "previous_id" not in columns and "deleted_at" not in columns
            assert set(rows) == {"resp_old", "resp_c"}  # the hidden row went
            assert rows["resp_c"] == [
                _user("q1"), {"type": "message", "role": "assistant", "content": "a1"}, _user("q2"),
                {"type": "message", "role": "assistant", "content": "a2"}, _user("q3"),
                {"type": "message", "role": "assistant", "content": "a3"}, _user("q4")]
            await migrate(engine)  # and up again
        finally:
            await engine.dispose()

    with scratch_database(backend, tmp_path) as url:
        asyncio.run(go(url))

"""Migration 0006 gives files written before it an owning key: an output or error file its
batch's key, an input file the key of the oldest batch naming it; an upload no batch names keeps
none (only the org's admin keys see it)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from inferd.store.batches import BatchRepository
from inferd.store.db import create_engine, migrate
from inferd.store.files import FileStore
from inferd.store.tables import batches, files
from tests.harness import Backend, scratch_database, upgrade_to



def _file(file_id: str, purpose: str = "batch") -> dict[str, Any]:
    return {"id": file_id, "org_id": 1, "filename": f"{file_id}.jsonl", "bytes": 1, "purpose": purpose,
            "status": "processed", "path": f"files/{file_id}.jsonl", "created_at": datetime(2026, 1, 1)}


def _batch(hex_id: str, key_id: str, input_file_id: str, done: bool) -> dict[str, Any]:
    return {"id": f"batch_{hex_id}", "org_id": 1, "key_id": key_id, "input_file_id": input_file_id,
            "endpoint": "/v1/chat/completions", "completion_window": "24h",
            "status": "completed" if done else "in_progress", "validated": done, "total": 0,
            "output_file_id": f"file-out-{hex_id}" if done else None,
            "error_file_id": f"file-err-{hex_id}" if done else None,
            "created_at": datetime(2026, 1, 1), "expires_at": datetime(2026, 1, 1) + timedelta(days=1)}


def test_existing_files_get_their_owner(tmp_path: Path, backend: Backend) -> None:

    async def go(url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade_to("0005"))
                # `shared` is named by KEYA's batch first, then KEYB's; `orphan` by none.
                await conn.execute(insert(files), [_file("file-shared"), _file("file-orphan"), _file("file-b"),
                                                   _file("file-out-aaa", "batch_output"),
                                                   _file("file-err-aaa", "batch_output")])
                await conn.execute(insert(batches), [_batch("aaa", "KEYA", "file-shared", True)])
                await conn.execute(insert(batches), [_batch("bbb", "KEYB", "file-shared", False)])
                await conn.execute(insert(batches), [_batch("ccc", "KEYB", "file-b", False)])
            await migrate(engine)
            store = FileStore(engine, tmp_path / "data")
            owners = {f: (await store.get(f)).key_id  # type: ignore[union-attr]
                      for f in ("file-shared", "file-orphan", "file-b", "file-out-aaa", "file-err-aaa")}
            assert owners == {"file-shared": "KEYA", "file-orphan": None, "file-b": "KEYB",
                              "file-out-aaa": "KEYA", "file-err-aaa": "KEYA"}
            # What the routes ask: a key sees its own, an admin (no key filter) the org's.
            assert await store.get("file-shared", 1, "KEYB") is None
            assert await store.get("file-orphan", 1, "KEYA") is None
            assert (await store.get("file-orphan", 1)) is not None
            repo = BatchRepository(engine)
            assert [b["id"] for b in await repo.page(1, "KEYB", 10, None)] == ["batch_ccc", "batch_bbb"]
            assert len(await repo.page(1, None, 10, None)) == 3
            assert (await repo.get("batch_aaa"))["cancel_reason"] is None  # type: ignore[index]
        finally:
            await engine.dispose()

    with scratch_database(backend, tmp_path) as url:
        asyncio.run(go(url))

"""The stored-response writer when another connection holds the SQLite write lock: the rows wait
for it on a thread and are stored, exactly as written on the loop (the real database, no server)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path


from inferd.store.db import create_engine, migrate
from inferd.store.hot_sqlite import HotSqlite
from inferd.store.responses import ResponseRepository, StoredResponse


def test_a_save_waits_for_another_writer_and_lands(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"

    async def go() -> list[StoredResponse | None]:
        engine = create_engine(f"sqlite:///{path}")
        await migrate(engine)
        hot = HotSqlite(str(path))
        repo = ResponseRepository(engine, hot)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        try:
            saves = [asyncio.ensure_future(repo.save(StoredResponse(f"resp_{i}", "KEY", [{"i": i}], {"id": i})))
                     for i in range(3)]
            await asyncio.sleep(0.5)
            assert not any(save.done() for save in saves), "the saves must wait for the lock"
        finally:
            blocker.execute("COMMIT")
            blocker.close()
        await asyncio.wait_for(asyncio.gather(*saves), 30)
        found = [await repo.get(f"resp_{i}", "KEY") for i in range(3)]
        await repo.close()
        hot.close()
        await engine.dispose()
        return found

    found = asyncio.run(go())
    assert [stored.response if stored else None for stored in found] == [{"id": 0}, {"id": 1}, {"id": 2}]
    assert [stored.input_items if stored else None for stored in found] == [[{"i": 0}], [{"i": 1}], [{"i": 2}]]

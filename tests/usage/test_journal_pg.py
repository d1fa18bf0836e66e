"""PostgreSQL's fold of the usage journals (metering/fold_pg.py) on the run's database:
rows appended by several writers, folded by their writers and by readers' `settle`, at the same
time or one after another, land exactly once with their spend; journals of gone processes are
folded and deleted; two data dirs on one database never forget each other's journals."""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Awaitable, Callable

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from inferd.metering.fold_pg import directory_id, fold, settle
from inferd.metering.journal_file import JournalFile
from inferd.store.db import create_engine, migrate, pg_dsn
from tests.harness import Backend
from tests.usage.conftest import usage_row


@pytest.fixture()
def dsn(backend: Backend) -> str:
    if not backend.database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's fold")

    async def go() -> None:
        engine = create_engine(backend.database_url)
        try:
            await migrate(engine)
        finally:
            await engine.dispose()

    asyncio.run(go())
    return pg_dsn(make_url(backend.database_url))


def _run(dsn: str, work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        conn = await asyncpg.connect(dsn)
        try:
            return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(go())


def _key() -> str:
    return f"J{uuid.uuid4().hex[:10].upper()}:s"


def _rows(key: str, count: int, minute: int = 0) -> list[dict[str, Any]]:
    return [usage_row(key, datetime(2026, 3, 1, 10, minute, i, 250_000 + i), cost=0.5) for i in range(count)]


def _stored(dsn: str, *keys: str) -> dict[str, int]:
    async def work(conn: asyncpg.Connection) -> dict[str, int]:
        found = await conn.fetch("SELECT key_id, count(*) AS n FROM usage_rows WHERE key_id = ANY($1) GROUP BY key_id",
                                 [k.split(":")[0] for k in keys])
        return {r["key_id"]: r["n"] for r in found}

    return _run(dsn, work)  # type: ignore[no-any-return]


def _spend(dsn: str, key: str) -> float:
    async def work(conn: asyncpg.Connection) -> float:
        return float(await conn.fetchval("SELECT coalesce(sum(spend_usd), 0) FROM spend WHERE scope = 'key' AND owner = $1",
                                         key.split(":")[0]))

    return _run(dsn, work)  # type: ignore[no-any-return]


def _journal(folder: Path) -> JournalFile:
    journal = JournalFile(folder)
    journal.open()
    return journal


def test_rows_of_two_writers_fold_once_whoever_folds_them(dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "journals"
    one, two = _key(), _key()
    first, second = _journal(folder), _journal(folder)
    ids = directory_id(folder)

    async def work(conn: asyncpg.Connection) -> list[int]:
        for row in _rows(one, 3):
            first.append(row)
        for row in _rows(two, 2):
            second.append(row)
        counts = [await fold(conn, first, ids)]  # the writer folds its own from memory
        for row in _rows(one, 2, minute=5):
            first.append(row)
        counts.append(await settle(conn, folder))  # a reader: the second's two, the first's two new
        counts.append(await settle(conn, folder))  # nothing left
        counts.append(await fold(conn, first, ids))  # the writers find their rows folded already
        counts.append(await fold(conn, second, ids))
        return counts

    try:
        assert _run(dsn, work) == [3, 4, 0, 0, 0]
        assert first.pending == [] and second.pending == []
    finally:
        first.close()
        second.close()
    assert _stored(dsn, one, two) == {one.split(":")[0]: 5, two.split(":")[0]: 2}
    assert _spend(dsn, one) == 2.5 and _spend(dsn, two) == 1.0


def test_a_writer_and_readers_folding_at_once_write_each_row_once(dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "journals"
    key = _key()
    writer = _journal(folder)
    ids = directory_id(folder)

    async def race() -> int:
        conns = [await asyncpg.connect(dsn) for _ in range(3)]
        try:
            written = 0
            for round_ in range(20):
                for row in _rows(key, 3, minute=round_ % 60):
                    writer.append(row)
                counts = await asyncio.gather(fold(conns[0], writer, ids), settle(conns[1], folder),
                                              settle(conns[2], folder))
                written += sum(counts)
            return written
        finally:
            for conn in conns:
                await conn.close()

    try:
        assert asyncio.run(race()) == 60
    finally:
        writer.close()
    assert _stored(dsn, key) == {key.split(":")[0]: 60}
    assert _spend(dsn, key) == 30.0


def test_a_gone_writers_journal_is_folded_then_deleted_and_its_cut_line_skipped(dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "journals"
    dead, alive = _key(), _key()
    gone = _journal(folder)
    for row in _rows(dead, 4):
        gone.append(row)
    path = folder / gone.name
    with open(path, "ab") as journal:
        journal.write(b'{"org":"usage-tests","key_id":"CCC","cost_usd":0.5,"crea')  # died in a write
    os.close(gone._fd)  # the process is gone: its lock goes with it, nothing folded, nothing deleted
    live = _journal(folder)
    live.append(_rows(alive, 1)[0])
    try:
        assert _run(dsn, lambda conn: settle(conn, folder)) == 5
        assert not path.exists()  # folded and deleted
        assert (folder / live.name).exists()  # a live writer's journal stays
        assert _run(dsn, lambda conn: settle(conn, folder)) == 0
    finally:
        live.close()
    assert _stored(dsn, dead, alive) == {dead.split(":")[0]: 4, alive.split(":")[0]: 1}
    assert _spend(dsn, dead) == 2.0
    name = f"{directory_id(folder)}/{path.name}"
    assert _run(dsn, lambda conn: conn.fetchval("SELECT count(*) FROM usage_journal WHERE name = $1", name)) == 0


def test_two_data_dirs_on_one_database_keep_each_others_journals(dsn: str, tmp_path: Path) -> None:
    """A settle forgets the journals its own folder no longer holds, and no other folder's: were it
    to forget a live journal of another folder, that folder's next settle would fold it again."""
    ours, theirs = tmp_path / "a", tmp_path / "b"
    key = _key()
    writer = _journal(theirs)
    try:
        for row in _rows(key, 2):
            writer.append(row)
        assert _run(dsn, lambda conn: settle(conn, theirs)) == 2
        _journal(ours).close()  # the other folder exists, with no journal in it
        assert _run(dsn, lambda conn: settle(conn, ours)) == 0
        assert _run(dsn, lambda conn: settle(conn, theirs)) == 0  # still known as folded: not folded again
    finally:
        writer.close()
    assert directory_id(ours) != directory_id(theirs)
    assert _stored(dsn, key) == {key.split(":")[0]: 2}

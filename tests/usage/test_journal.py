"""The SQLite usage journal (metering/journal_file.py) on a real database file: rows appended by
several writers, folded by their writers and by readers' `settle`, land exactly once with their
rollup and spend; journals of gone processes are folded and deleted; a line cut short is skipped."""

from __future__ import annotations

import asyncio
import os
import resource
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest

from inferd.metering import journal_file
from inferd.store.db import create_engine, migrate
from inferd.metering.journal_file import JournalFile, journal_dir, settle, settle_path
from tests.usage.conftest import usage_row


@pytest.fixture()
def database(tmp_path: Path) -> str:
    path = str(tmp_path / "journal.db")

    async def go() -> None:
        engine = create_engine(f"sqlite:///{path}")
        try:
            await migrate(engine)
        finally:
            await engine.dispose()

    asyncio.run(go())
    return path


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def _stored(path: str) -> list[tuple[str, str, float]]:
    conn = _connect(path)
    try:
        return sorted(conn.execute("SELECT key_id, created_at, cost_usd FROM usage_rows").fetchall())
    finally:
        conn.close()


def _spend(path: str) -> dict[tuple[str, str], float]:
    """Each key's spend by month, summed from its days."""
    conn = _connect(path)
    try:
        return {(k, m): s for k, m, s in conn.execute(
            "SELECT owner, substr(day, 1, 7), SUM(spend_usd) FROM spend WHERE scope = 'key' "
            "GROUP BY owner, substr(day, 1, 7)")}
    finally:
        conn.close()


def _rows(key: str, count: int, minute: int = 0) -> list[dict]:
    return [usage_row(key, datetime(2026, 3, 1, 10, minute, i, 250_000 + i), cost=0.5) for i in range(count)]


def test_rows_of_two_writers_fold_once_whoever_folds_them(database: str) -> None:
    first, second = JournalFile(journal_dir(database)), JournalFile(journal_dir(database))
    first.open()
    second.open()
    conn = _connect(database)
    try:
        for row in _rows("AAA:s", 3):
            first.append(row)
        for row in _rows("BBB:s", 2):
            second.append(row)
        assert first.fold(conn) == 3  # the writer folds its own from memory
        for row in _rows("AAA:s", 2, minute=5):
            first.append(row)
        # A reader settles every journal: the second writer's two rows and the first's two new ones.
        assert settle(conn, database) == 4
        assert settle(conn, database) == 0  # nothing left: no lock taken, nothing written
        # The writers' own folds then find their rows folded already and write none again.
        assert first.fold(conn) == 0 and second.fold(conn) == 0
        assert first.pending == [] and second.pending == []
    finally:
        conn.close()
        first.close()
        second.close()
    stored = _stored(database)
    assert len(stored) == 7
    assert [cost for _, _, cost in stored] == [0.5] * 7
    assert {created for _, created, _ in stored} >= {"2026-03-01 10:00:00.250000", "2026-03-01 10:05:01.250001"}
    assert _spend(database) == {("AAA", "2026-03"): 2.5, ("BBB", "2026-03"): 1.0}
    assert os.listdir(journal_dir(database)) == []  # folded journals are deleted when their writers close


def test_a_gone_writers_journal_is_folded_then_deleted_and_its_cut_line_skipped(database: str) -> None:
    gone = JournalFile(journal_dir(database))
    gone.open()
    for row in _rows("CCC:s", 4):
        gone.append(row)
    path = journal_dir(database) / gone.name
    with open(path, "ab") as journal:
        journal.write(b'{"org":"usage-tests","key_id":"CCC","cost_usd":0.5,"crea')  # died in a write
    os.close(gone._fd)  # the process is gone: its lock goes with it, nothing folded, nothing deleted
    live = JournalFile(journal_dir(database))
    live.open()
    live.append(_rows("DDD:s", 1)[0])
    assert settle_path(database) == 5
    assert not path.exists()  # folded and deleted
    assert (journal_dir(database) / live.name).exists()  # a live writer's journal stays
    assert sum(1 for key, _, _ in _stored(database) if key == "CCC") == 4
    assert settle_path(database) == 0
    live.close()
    assert _spend(database) == {("CCC", "2026-03"): 2.0, ("DDD", "2026-03"): 0.5}


def test_a_fold_that_fails_keeps_its_rows_for_the_next(database: str) -> None:
    writer = JournalFile(journal_dir(database))
    writer.open()
    for row in _rows("EEE:s", 2):
        writer.append(row)
    conn = _connect(database)
    try:
        conn.execute("ALTER TABLE usage_rows RENAME TO usage_rows_away")
        with pytest.raises(sqlite3.OperationalError):
            writer.fold(conn)
        assert len(writer.pending) == 2 and not conn.in_transaction
        conn.execute("ALTER TABLE usage_rows_away RENAME TO usage_rows")
        assert writer.fold(conn) == 2
    finally:
        conn.close()
        writer.close()
    assert len(_stored(database)) == 2


def test_a_long_journal_is_replaced_once_folded(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_file, "ROTATE_BYTES", 1000)
    writer = JournalFile(journal_dir(database))
    writer.open()
    first_name = writer.name
    conn = _connect(database)
    try:
        for row in _rows("FFF:s", 5):
            writer.append(row)
        writer.rotate_if_long()
        assert writer.name == first_name  # rows pending: not yet
        writer.fold(conn)
        writer.rotate_if_long()
        assert writer.name != first_name
        assert os.listdir(journal_dir(database)) == [writer.name]
        writer.append(_rows("FFF:s", 1, minute=9)[0])
        assert writer.fold(conn) == 1
        settle(conn, database)  # forgets the deleted journal's folded length
        names = [name for (name,) in conn.execute("SELECT name FROM usage_journal")]
        assert names == [writer.name]
    finally:
        conn.close()
        writer.close()
    assert len(_stored(database)) == 6


def test_rows_before_a_failed_write_are_folded_from_the_journal_it_leaves(database: str) -> None:
    """A write cut short (the file size limit lowered under it, as a full disk would) raises; the
    journal is left with its complete lines, unlocked, and rows go on in a new one. A `settle`
    folds the old one's rows and deletes it; the cut line is never folded."""
    writer = JournalFile(journal_dir(database))
    writer.open()
    for row in _rows("GGG:s", 2):
        writer.append(row)
    first = writer.name
    length = (journal_dir(database) / first).stat().st_size
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (length + 10, limit[1]))
    try:
        with pytest.raises(OSError):
            writer.append(_rows("GGG:s", 1, minute=7)[0])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    assert writer.orphaned and writer.pending == [] and writer.name != first
    assert (journal_dir(database) / first).stat().st_size == length + 10  # the cut line is there
    writer.append(_rows("GGG:s", 1, minute=8)[0])
    assert settle_path(database) == 3  # the old journal's two rows, and the new one's row
    assert not (journal_dir(database) / first).exists()
    conn = _connect(database)
    try:
        assert writer.fold(conn) == 0  # its own row was folded by the settle
    finally:
        conn.close()
        writer.close()
    assert len(_stored(database)) == 3
    assert _spend(database) == {("GGG", "2026-03"): 1.5}

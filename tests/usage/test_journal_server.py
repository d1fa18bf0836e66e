"""The usage journal in the running server, on SQLite and on PostgreSQL: a reply's row is durable
before the reply, visible to every reader at once, folded by the server on its own, kept while
the database refuses it, and recovered after the server is killed."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterator

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from inferd.metering.journal_file import journal_dir
from inferd.metering.journal_pg import pg_journal_dir
from inferd.store.db import is_sqlite, pg_dsn
from tests.harness import Backend, Server, auth
from tests.usage.test_cli import cells, inferd_usage
from tests.usage.conftest import get, ok

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture()
def store(tmp_path: Path, backend: Backend) -> Backend:
    """SQLite: a database file of the test's own. PostgreSQL: the run's database (its journals are
    in each server's data dir)."""
    if is_sqlite(backend.database_url):
        return Backend(f"sqlite:///{tmp_path / 'journal.db'}", backend.redis_url, backend.redis_prefix + "journal:")
    return Backend(backend.database_url, backend.redis_url, backend.redis_prefix + "journal:")


@pytest.fixture()
def journaled(tmp_path: Path, store: Backend, config_file: Path) -> Iterator[Server]:
    server = Server.start(tmp_path, store, config_file)
    try:
        yield server
    finally:
        server.stop()


def _sqlite(server: Server) -> str | None:
    """The SQLite database file, or None on PostgreSQL."""
    url = server.backend.database_url
    return url.split(":///", 1)[1] if is_sqlite(url) else None


def _journals(server: Server) -> list[str]:
    """The journals in the server's journal folder."""
    database = _sqlite(server)
    folder = journal_dir(database) if database else pg_journal_dir(server.data_dir,
                                                                   make_url(server.backend.database_url))
    return sorted(name for name in os.listdir(folder) if name.endswith(".jsonl"))


def _pg(server: Server, statement: str, *args: object) -> object:
    async def run() -> object:
        conn = await asyncpg.connect(pg_dsn(make_url(server.backend.database_url)))
        try:
            return await conn.fetchval(statement, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def _sql(server: Server, statement: str) -> None:
    """Run a statement on the server's database, in autocommit."""
    database = _sqlite(server)
    if database is None:
        _pg(server, statement)
        return
    conn = sqlite3.connect(database, timeout=5, isolation_level=None)
    try:
        conn.execute(statement)
    finally:
        conn.close()


def _raw_count(server: Server, key: str) -> int:
    """Rows of `key` in the table, read without folding anything (what the server folded itself)."""
    key_id = key.split(":")[0]
    database = _sqlite(server)
    if database is None:
        count = _pg(server, "SELECT count(*) FROM usage_rows WHERE key_id = $1", key_id)
        return int(count)  # type: ignore[call-overload]
    conn = sqlite3.connect(database, timeout=5)
    try:
        return int(conn.execute("SELECT count(*) FROM usage_rows WHERE key_id = ?", (key_id,)).fetchone()[0])
    finally:
        conn.close()


def _chat(server: Server, key: str, stream: bool = False) -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", headers=auth(key), json={**BODY, "stream": stream}, timeout=30)


def test_the_server_folds_its_rows_without_a_reader(journaled: Server) -> None:
    key = journaled.create_key()
    for stream in (False, True, False):
        assert _chat(journaled, key, stream).status_code == 200
    deadline = time.monotonic() + 5
    while _raw_count(journaled, key) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _raw_count(journaled, key) == 3
    names = _journals(journaled)
    assert len(names) == 1 and names[0].startswith(f"{journaled.process.pid}-")  # this process's, locked


def test_a_reply_s_row_is_in_the_usage_report_at_once(journaled: Server) -> None:
    key = journaled.create_key()
    for _ in range(3):
        assert _chat(journaled, key).status_code == 200
        assert _chat(journaled, key, stream=True).text.rstrip().endswith("[DONE]")
    # Asked at once, before the server's own fold: the report folds every journal first.
    rows = ok(get(journaled, key))["data"]
    assert len(rows) == 6 and {row["status_code"] for row in rows} == {200}


def test_another_server_on_the_same_database_sees_the_row(
        tmp_path: Path, store: Backend, config_file: Path) -> None:
    """Replicas with data directories of their own. On SQLite they share the database file, whose
    journals any reader folds: the row is seen at once. On PostgreSQL each replica folds its own
    journal: the row is seen as soon as the first folds it, within milliseconds."""
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = Server.start(tmp_path / "first", store, config_file)
    second = Server.start(tmp_path / "second", store, config_file)
    try:
        key = first.create_key()
        seen, at_once = [], []
        for count in range(1, 6):
            assert _chat(first, key).status_code == 200
            began = time.monotonic()
            rows = len(ok(get(second, key))["data"])
            at_once.append(rows)
            while rows < count and time.monotonic() - began < 2:
                time.sleep(0.005)
                rows = len(ok(get(second, key))["data"])
            seen.append(rows)
        assert seen == [1, 2, 3, 4, 5]
        if is_sqlite(store.database_url):
            assert at_once == [1, 2, 3, 4, 5]  # the reader folded the first's journal itself
    finally:
        first.stop()
        second.stop()


def test_rows_wait_in_the_journal_while_the_database_refuses_them(journaled: Server) -> None:
    key = journaled.create_key()
    _sql(journaled, "ALTER TABLE usage_rows RENAME TO usage_rows_away")
    try:
        assert _chat(journaled, key).status_code == 200
        assert _chat(journaled, key, stream=True).text.rstrip().endswith("[DONE]")
        time.sleep(0.3)  # the server's folds fail meanwhile, and retry
    finally:
        _sql(journaled, "ALTER TABLE usage_rows_away RENAME TO usage_rows")
    deadline = time.monotonic() + 10
    while _raw_count(journaled, key) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _raw_count(journaled, key) == 2  # folded by the server's retry, once each
    assert "usage fold failed" in journaled.log()


def test_rows_of_a_killed_server_are_recovered_when_it_starts_again(
        tmp_path: Path, store: Backend, config_file: Path) -> None:
    server = Server.start(tmp_path, store, config_file)
    key = server.create_key()
    try:
        replies = [_chat(server, key), _chat(server, key, stream=True), _chat(server, key)]
        server.stop(signal.SIGKILL)  # at once: the rows may not be folded yet
    finally:
        server.stop()
    assert [r.status_code for r in replies] == [200, 200, 200]
    dead = _journals(server)
    assert len(dead) == 1  # the killed process's journal is left behind
    again = Server.start(tmp_path, store, config_file)
    try:
        deadline = time.monotonic() + 5  # folded at start, before any reader (in a task on PostgreSQL)
        while _raw_count(again, key) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _raw_count(again, key) == 3
        assert len(ok(get(again, key))["data"]) == 3
        assert dead[0] not in _journals(again)  # and deleted
    finally:
        again.stop()


def test_the_cli_report_folds_a_killed_server_s_journal(
        tmp_path: Path, store: Backend, config_file: Path) -> None:
    server = Server.start(tmp_path, store, config_file)
    key = server.create_key()
    try:
        assert _chat(server, key).status_code == 200
        server.stop(signal.SIGKILL)  # within a millisecond or two: before the server's own fold
    finally:
        server.stop()
    unfolded = _raw_count(server, key) == 0
    report = inferd_usage(server, "--key", key.split(":")[0])
    assert report.returncode == 0, report.stderr
    assert cells(report.stdout, "mock-chat")[1] == "1"
    assert _raw_count(server, key) == 1
    if unfolded:  # the usual case: the report itself folded the dead server's journal, and deleted it
        assert _journals(server) == []


class _Blocker:
    """Another connection that keeps the server's folds waiting: SQLite's write lock, or on
    PostgreSQL a SHARE lock on `usage_rows` (reads go on, inserts wait)."""

    def __init__(self, server: Server) -> None:
        self._database = _sqlite(server)
        self._dsn = pg_dsn(make_url(server.backend.database_url))
        self._locked = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._hold()))
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> None:
        if self._database is not None:
            self._conn = sqlite3.connect(self._database, isolation_level=None, timeout=30)
            self._conn.execute("BEGIN IMMEDIATE")
        else:
            self._thread.start()
            assert self._locked.wait(10)

    async def _hold(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        try:
            async with conn.transaction():
                await conn.execute("LOCK TABLE usage_rows IN SHARE MODE")
                self._locked.set()
                while not self._release.is_set():
                    await asyncio.sleep(0.01)
        finally:
            await conn.close()

    def __exit__(self, *_: object) -> None:
        if self._conn is not None:
            self._conn.execute("COMMIT")
            self._conn.close()
        else:
            self._release.set()
            self._thread.join(10)


def test_replies_do_not_wait_for_another_writer_and_a_report_waits_for_their_rows(journaled: Server) -> None:
    """Another connection keeps the server's folds waiting: replies go out at once (their rows wait
    in the journal, not for a commit), and a report asked meanwhile waits to fold them, then has them."""
    key = journaled.create_key()
    report: dict[str, httpx.Response] = {}
    asking = threading.Thread(target=lambda: report.update(reply=get(journaled, key)))
    with _Blocker(journaled):
        # Order, not a bound on the replies' time: both replies are complete while the lock is held
        # (it is released only after them) and before their rows are in the table. A reply that
        # waited for the lock would wait for the release, or for the 30 s busy timeout and fail; the
        # bound, half that, holds however busy the machine (their speed is measured in bench/overhead.py).
        started = time.monotonic()
        assert _chat(journaled, key).status_code == 200
        assert _chat(journaled, key, stream=True).text.rstrip().endswith("[DONE]")
        assert time.monotonic() - started < 15
        assert _raw_count(journaled, key) == 0  # their rows wait in the journal
        asking.start()
        asking.join(1.5)
        assert asking.is_alive()  # the report waits to fold the rows
    asking.join(30)
    assert len(ok(report["reply"])["data"]) == 2

"""The usage journal in the running server (SQLite): a reply's row is durable before the reply,
visible to every reader at once, folded by the server on its own, kept while the database
refuses it, and recovered after the server is killed."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from inferd.store.db import is_sqlite
from inferd.store.usage_journal import journal_dir
from tests.harness import Backend, Server, auth
from tests.usage.test_cli import cells, inferd_usage
from tests.usage.conftest import get, ok

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture()
def sqlite_backend(tmp_path: Path, backend: Backend) -> Backend:
    """A SQLite database of the test's own (the journal is SQLite's; PostgreSQL commits per reply)."""
    if not is_sqlite(backend.database_url):
        pytest.skip("the usage journal is SQLite's")
    return Backend(f"sqlite:///{tmp_path / 'journal.db'}", backend.redis_url, backend.redis_prefix + "journal:")


@pytest.fixture()
def journaled(tmp_path: Path, sqlite_backend: Backend, config_file: Path) -> Iterator[Server]:
    server = Server.start(tmp_path, sqlite_backend, config_file)
    try:
        yield server
    finally:
        server.stop()


def _database(server: Server) -> str:
    return server.backend.database_url.split(":///", 1)[1]


def _raw_count(server: Server, key: str) -> int:
    """Rows of `key` in the table, read without folding anything (what the server folded itself)."""
    conn = sqlite3.connect(_database(server), timeout=5)
    try:
        return int(conn.execute("SELECT count(*) FROM usage_rows WHERE key_id = ?", (key.split(":")[0],)).fetchone()[0])
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
    names = os.listdir(journal_dir(_database(journaled)))
    assert len(names) == 1 and names[0].startswith(f"{journaled.process.pid}-")  # this process's, locked


def test_a_reply_s_row_is_in_the_usage_report_at_once(journaled: Server) -> None:
    key = journaled.create_key()
    for _ in range(3):
        assert _chat(journaled, key).status_code == 200
        assert _chat(journaled, key, stream=True).text.rstrip().endswith("[DONE]")
    # Asked at once, before the server's own fold: the report folds every journal first.
    rows = ok(get(journaled, key))["data"]
    assert len(rows) == 6 and {row["status_code"] for row in rows} == {200}


def test_another_server_on_the_same_database_sees_the_row_at_once(
        tmp_path: Path, sqlite_backend: Backend, config_file: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = Server.start(tmp_path / "a", sqlite_backend, config_file)
    second = Server.start(tmp_path / "b", sqlite_backend, config_file)
    try:
        key = first.create_key()
        seen = []
        for _ in range(5):
            assert _chat(first, key).status_code == 200
            seen.append(len(ok(get(second, key))["data"]))
        assert seen == [1, 2, 3, 4, 5]
    finally:
        first.stop()
        second.stop()


def test_rows_wait_in_the_journal_while_the_database_refuses_them(journaled: Server) -> None:
    key = journaled.create_key()
    conn = sqlite3.connect(_database(journaled), timeout=5, isolation_level=None)
    try:
        conn.execute("ALTER TABLE usage_rows RENAME TO usage_rows_away")
        try:
            assert _chat(journaled, key).status_code == 200
            assert _chat(journaled, key, stream=True).text.rstrip().endswith("[DONE]")
            time.sleep(0.3)  # the server's folds fail meanwhile, and retry
        finally:
            conn.execute("ALTER TABLE usage_rows_away RENAME TO usage_rows")
    finally:
        conn.close()
    deadline = time.monotonic() + 10
    while _raw_count(journaled, key) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _raw_count(journaled, key) == 2  # folded by the server's retry, once each
    assert "usage fold failed" in journaled.log()


def test_rows_of_a_killed_server_are_recovered_when_it_starts_again(
        tmp_path: Path, sqlite_backend: Backend, config_file: Path) -> None:
    server = Server.start(tmp_path, sqlite_backend, config_file)
    key = server.create_key()
    try:
        replies = [_chat(server, key), _chat(server, key, stream=True), _chat(server, key)]
        server.stop(signal.SIGKILL)  # at once: the rows may not be folded yet
    finally:
        server.stop()
    assert [r.status_code for r in replies] == [200, 200, 200]
    dead = os.listdir(journal_dir(_database(server)))
    assert len(dead) == 1  # the killed process's journal is left behind
    again = Server.start(tmp_path, sqlite_backend, config_file)
    try:
        assert _raw_count(again, key) == 3  # folded at start, before any reader
        assert len(ok(get(again, key))["data"]) == 3
        assert dead[0] not in os.listdir(journal_dir(_database(again)))  # and deleted
    finally:
        again.stop()


def test_the_cli_report_folds_a_killed_server_s_journal(
        tmp_path: Path, sqlite_backend: Backend, config_file: Path) -> None:
    server = Server.start(tmp_path, sqlite_backend, config_file)
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
        assert os.listdir(journal_dir(_database(server))) == []


def test_replies_do_not_wait_for_another_writer_and_a_report_waits_for_their_rows(journaled: Server) -> None:
    """Another connection holds SQLite's write lock: replies go out at once (their rows wait in
    the journal, not for a commit), and a report asked meanwhile waits for the lock, then has them."""
    key = journaled.create_key()
    blocker = sqlite3.connect(_database(journaled), isolation_level=None, timeout=30)
    report: dict[str, httpx.Response] = {}
    asking = threading.Thread(target=lambda: report.update(reply=get(journaled, key)))
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        assert _chat(journaled, key).status_code == 200
        assert _chat(journaled, key, stream=True).text.rstrip().endswith("[DONE]")
        assert time.monotonic() - started < 2.0  # no reply waited for the lock
        asking.start()
        asking.join(1.5)
        assert asking.is_alive()  # the report waits to fold the rows
    finally:
        blocker.execute("COMMIT")
        blocker.close()
    asking.join(30)
    assert len(ok(report["reply"])["data"]) == 2

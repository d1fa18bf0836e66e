"""The usage journal: where a call's usage row is durable before its reply. The files and
SQLite's fold are here; PostgreSQL folds the same files (fold_pg.py).

Committing one row to SQLite costs 75-86 us of CPU (seven WAL frames written, whatever the row),
more than the rest of a proxied call at concurrency 1 (issue 15). Appending the row to a file with
one `write` costs a few microseconds and survives the process being killed, which is what a WAL
commit with `synchronous=NORMAL` survives too (neither is flushed to the disk, so neither
survives a power cut). The rows are then folded into SQLite many at a time:

- by the process that wrote them, a few milliseconds later (`JournalFile.fold`);
- by anyone about to read usage or spend (`settle`): the usage API, the spend re-read, the CLI,
  the console. It folds what every journal holds, so a row is in the tables for every reader
  once its reply has left, as when the reply waited for the commit;
- at start, where journals of processes that died are folded and deleted.

Exactly once: the table `usage_journal` holds how many bytes of each journal are folded, updated
in the transaction that folds them, so folds by several processes never write a row twice, and a
crash between a fold's commit and anything after it loses and repeats nothing.

Each process appends to a journal of its own (`<pid>-<random>.jsonl` in `<database>.usage-journal/`),
holding an exclusive `flock` on it while it lives: a journal whose lock can be taken belongs to a
process that is gone, and once folded it is deleted. A line is a row as JSON; a line cut short
(a write the process died in, or a full disk) is never acknowledged and is skipped.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import secrets
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from inferd.store.usage_write import spend_amounts, sqlite_usage_writes

log = logging.getLogger(__name__)

ROTATE_BYTES = 8 << 20  # a journal this long, once folded, is replaced by a new one

_FOLDED = "SELECT folded FROM usage_journal WHERE name = ?"
_MARK = ("INSERT INTO usage_journal (name, folded) VALUES (?, ?) "
         "ON CONFLICT (name) DO UPDATE SET folded = excluded.folded")


def journal_dir(database_path: str) -> Path:
    """The folder of a SQLite database's usage journals."""
    return Path(database_path + ".usage-journal")


def _write_rows(conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
    for sql, parameters in sqlite_usage_writes(rows, spend_amounts(rows)):
        conn.executemany(sql, parameters)


def unlink_journal(path: Path) -> None:
    """Delete a journal; another process's `settle` may have deleted it first."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        row = orjson.loads(line)
        row["created_at"] = datetime.fromisoformat(row["created_at"])
        row.setdefault("guardrail", None)  # a line written before rows had it
        return row  # type: ignore[no-any-return]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT on a sqlite3 connection in autocommit mode; ROLLBACK on error."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self._conn.execute("COMMIT")
        elif self._conn.in_transaction:
            self._conn.execute("ROLLBACK")


class JournalFile:
    """This process's journal: rows appended on the event loop, folded in batches.

    `pending` holds the rows appended since the last fold with the journal's length after each,
    so a fold writes them from memory; rows another process's `settle` folded meanwhile (the
    journal's folded length is past their end) are left out."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self.name = ""
        self._fd = -1
        self._length = 0
        self.pending: list[tuple[dict[str, Any], int]] = []
        self.folded = 0  # the journal's folded length as this process last saw it (PostgreSQL's fold)
        self.orphaned = False  # a journal left after a failed write waits for a `settle`

    def open(self) -> None:
        """Start a new journal (the folder made if needed), locked for this process's life."""
        self._dir.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{secrets.token_hex(6)}.jsonl"
        fd = os.open(self._dir / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.name, self._fd, self._length, self.folded = name, fd, 0, 0

    def append(self, row: dict[str, Any]) -> None:
        """Make a row durable: one `write` of one line. Raises OSError when it could not be."""
        if self._fd < 0:
            self.open()  # the last one failed
        line = orjson.dumps(row) + b"\n"
        try:
            written = os.write(self._fd, line)
        except OSError:
            self._leave_after_failure()
            raise
        if written != len(line):  # a full disk: the cut line is never folded, and no line may follow it
            self._leave_after_failure()
            raise OSError(errno.ENOSPC, "the usage journal was written short")
        self._length += written
        self.pending.append((row, self._length))

    def _leave_after_failure(self) -> None:
        """Rows after a failed write go to a new journal. The old one is unlocked, as a gone
        process's would be: the next `settle` folds its complete lines (the pending rows) and
        deletes it."""
        os.close(self._fd)
        self._fd = -1
        self.pending = []
        self.orphaned = True
        try:
            self.open()
        except OSError as exc:
            log.warning("could not start a new usage journal: %s", exc)

    def fold(self, conn: sqlite3.Connection) -> int:
        """Write the pending rows, and how far the journal is folded, in one transaction; the
        number of rows it wrote. Rows appended while it runs (from another thread) stay pending."""
        pending = self.pending  # the list a failed write may replace meanwhile (on the loop)
        count = len(pending)
        if not count:
            return 0
        batch = pending[:count]
        with _Transaction(conn):
            row = conn.execute(_FOLDED, (self.name,)).fetchone()
            folded = row[0] if row else 0
            rows = [values for values, end in batch if end > folded]
            if rows:
                _write_rows(conn, rows)
            conn.execute(_MARK, (self.name, max(folded, batch[-1][1])))
        del pending[:count]
        return len(rows)

    def rotate_if_long(self) -> None:
        """Once everything is folded, replace a long journal by a new one and delete it (its
        `usage_journal` row goes at the next `settle`)."""
        if self.pending or self._length < ROTATE_BYTES:
            return
        old_fd, old_name = self._fd, self.name
        self.open()
        unlink_journal(self._dir / old_name)
        os.close(old_fd)

    def close(self) -> None:
        """Stop appending; delete the journal when everything in it is folded."""
        if self._fd < 0:
            return
        if not self.pending:
            unlink_journal(self._dir / self.name)
        os.close(self._fd)
        self._fd = -1


def _anything_to_do(conn: sqlite3.Connection, directory: Path) -> bool:
    """Whether a journal holds lines not folded yet or is a gone process's (to delete), or a
    deleted one is still in `usage_journal`. Takes no lock: a stat per journal, one read."""
    try:
        names = [name for name in os.listdir(directory) if name.endswith(".jsonl")]
    except FileNotFoundError:
        return False
    folded = dict(conn.execute("SELECT name, folded FROM usage_journal").fetchall())
    if set(folded) - set(names):  # journals deleted since they were folded: forget them
        return True
    for name in names:
        try:
            size = os.stat(directory / name).st_size
        except FileNotFoundError:
            continue
        if size != folded.get(name, 0):
            return True
        opened = open_journal(directory / name)
        if opened is not None:
            os.close(opened[0])
            if opened[1]:
                return True
    return False


def open_journal(path: Path) -> tuple[int, bool] | None:
    """A journal opened for reading, and whether its writer is gone (then the descriptor holds
    the writer's lock, until it is closed); None when it was deleted meanwhile."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return fd, False  # its writer lives
    return fd, True


def complete_rows(name: str, data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The rows of the complete lines at the start of `data`, and their length in bytes."""
    end = data.rfind(b"\n") + 1
    rows = []
    for line in data[:end].splitlines():
        row = _decode(line)
        if row is None:
            log.warning("usage journal %s: skipped a line that is not a row", name)
        else:
            rows.append(row)
    return rows, end


def settle(conn: sqlite3.Connection, database_path: str) -> int:
    """Fold every journal's complete lines that are not folded yet, in one transaction on `conn`
    (a sqlite3 connection in autocommit mode), and delete the journals of processes that are
    gone once they are folded. Returns how many rows it wrote; when there is nothing to fold it
    takes no lock and writes nothing."""
    directory = journal_dir(database_path)
    if not _anything_to_do(conn, directory):
        return 0
    written = 0
    gone: dict[str, int] = {}  # journal -> a descriptor holding its lock until it is deleted
    try:
        with _Transaction(conn):
            # Listed inside the transaction: no journal can be folded by anyone else meanwhile.
            names = [name for name in os.listdir(directory) if name.endswith(".jsonl")]
            folded = dict(conn.execute("SELECT name, folded FROM usage_journal").fetchall())
            for name in set(folded) - set(names):  # journals deleted since they were folded
                conn.execute("DELETE FROM usage_journal WHERE name = ?", (name,))
            for name in names:
                opened = open_journal(directory / name)
                if opened is None:
                    continue
                fd, writer_gone = opened
                if writer_gone:
                    gone[name] = fd  # closed once it is deleted
                start = folded.get(name, 0)
                try:
                    data = os.pread(fd, max(os.fstat(fd).st_size - start, 0), start)
                finally:
                    if not writer_gone:  # a live writer's: fold its complete lines, the rest comes later
                        os.close(fd)
                rows, length = complete_rows(name, data)
                if rows:
                    _write_rows(conn, rows)
                    written += len(rows)
                if length:
                    conn.execute(_MARK, (name, start + length))
        for name in gone:  # folded and committed; a line cut short was never acknowledged
            unlink_journal(directory / name)
    finally:
        for fd in gone.values():
            os.close(fd)
    return written


def settle_path(database_path: str) -> int:
    """`settle` on a connection of its own that waits for the write lock (CLI, tests, threads)."""
    if not journal_dir(database_path).is_dir():
        return 0
    conn = sqlite3.connect(database_path, isolation_level=None, timeout=30)
    try:
        return settle(conn, database_path)
    finally:
        conn.close()

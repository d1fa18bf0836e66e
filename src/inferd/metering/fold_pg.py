"""The usage journals of a PostgreSQL deployment, folded into PostgreSQL.

The journal files are SQLite's (journal_file.py: one per process, one line per row, an
exclusive `flock` while their writer lives), kept in the data dir, which the replicas of a
deployment share and which outlives any of them, as batch files must. A reply
waits for one `write` of its row instead of a round trip to PostgreSQL and a commit: at
concurrency 1 that round trip, and the wake-up after it, cost more than the rest of a proxied
call (issue 15).

PostgreSQL has no single write lock to fold under, as SQLite's `BEGIN IMMEDIATE` is. Instead each
fold claims the bytes it folds (`PG_JOURNAL_FOLD`): one statement writes the rows and moves the
journal's folded length in `usage_journal` from where the folder saw it to the end of what it
folds, and writes nothing when someone else moved it first. The folder then reads the length
again and folds what is left. So a row is written once, whoever folds it: the process that wrote
it, a reader's `settle` on any replica, or a start that finds the journal of a process that died.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from pathlib import Path
from typing import Any

import asyncpg

from inferd.metering.journal_file import JournalFile, complete_rows, open_journal, unlink_journal
from inferd.store.usage_write import PG_JOURNAL_FOLD, pg_usage_arguments, spend_amounts

log = logging.getLogger(__name__)

_FOLDED = "SELECT folded FROM usage_journal WHERE name = $1"


def journal_dir(data_dir: Path, database_url: str) -> Path:
    """Where a deployment's journals live: in the shared data dir, one folder per database (a
    data dir is never meant to serve two, and this keeps a mistake from mixing their rows)."""
    return data_dir / "usage-journal" / hashlib.sha256(database_url.encode()).hexdigest()[:16]


def directory_id(directory: Path) -> str:
    """The folder's id, made by whoever comes first and read by every other process that shares the
    folder. It prefixes the folder's journals' names in `usage_journal`, which every data dir on the
    database shares: a `settle` forgets only its own folder's deleted journals there."""
    path = directory / "id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    directory.mkdir(parents=True, exist_ok=True)
    draft = directory / f".id.{os.getpid()}.{secrets.token_hex(4)}"
    draft.write_text(secrets.token_hex(8) + "\n")
    try:
        os.link(draft, path)  # fails when another process made it first: theirs is the id
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return path.read_text().strip()


async def _claim(conn: asyncpg.Connection, name: str, start: int, end: int, rows: list[dict[str, Any]]) -> bool:
    """Write `rows` (bytes `start` to `end` of journal `name`) if nobody folded them first."""
    written = await conn.fetchval(PG_JOURNAL_FOLD, name, start, end,
                                  *pg_usage_arguments(rows, spend_amounts(rows)))
    return bool(written)


async def _folded(conn: asyncpg.Connection, name: str) -> int:
    return int(await conn.fetchval(_FOLDED, name) or 0)


async def fold(conn: asyncpg.Connection, journal: JournalFile, folder: str) -> int:
    """Write this process's pending rows (its folder's id `folder`); the number written. Rows a
    reader's `settle` folded meanwhile are left out. Rows appended while it runs stay pending."""
    pending = journal.pending  # the list a failed write may replace meanwhile
    count = len(pending)
    if not count:
        return 0
    batch = pending[:count]
    file_name = journal.name  # a failed write may start a new journal meanwhile
    name = f"{folder}/{file_name}"
    start, end = journal.folded, batch[-1][1]
    written = 0
    while start < end:
        rows = [values for values, row_end in batch if row_end > start]
        if await _claim(conn, name, start, end, rows):
            written = len(rows)
            start = end
        else:
            start = await _folded(conn, name)
    if journal.name == file_name:
        journal.folded = start
    del pending[:count]
    return written


async def settle(conn: asyncpg.Connection, directory: Path) -> int:
    """Fold every journal's complete lines that are not folded yet, and delete the journals of
    processes that are gone once they are folded. Returns how many rows it wrote."""
    if not directory.is_dir():
        return 0
    folder = directory_id(directory)
    # The lengths first, then the folder: a journal started in between is not mistaken for one
    # deleted since it was folded.
    folded: dict[str, int] = {name.split("/", 1)[1]: value for name, value in await conn.fetch(
        "SELECT name, folded FROM usage_journal WHERE name LIKE $1", folder + "/%")}
    names = [name for name in os.listdir(directory) if name.endswith(".jsonl")]
    for name in set(folded) - set(names):  # deleted since they were folded
        await conn.execute("DELETE FROM usage_journal WHERE name = $1 AND folded = $2",
                           f"{folder}/{name}", folded[name])
    written = 0
    for name in names:
        opened = open_journal(directory / name)
        if opened is None:
            continue
        fd, writer_gone = opened
        try:
            start = folded.get(name, 0)
            while True:
                data = os.pread(fd, max(os.fstat(fd).st_size - start, 0), start)
                rows, length = complete_rows(name, data)
                if not length:
                    break
                if await _claim(conn, f"{folder}/{name}", start, start + length, rows):
                    written += len(rows)
                    break
                start = await _folded(conn, f"{folder}/{name}")  # its writer or another reader was first
            if writer_gone:  # folded; a line cut short was never acknowledged
                unlink_journal(directory / name)
                await conn.execute("DELETE FROM usage_journal WHERE name = $1", f"{folder}/{name}")
        finally:
            os.close(fd)
    return written

"""The hot path's synchronous SQLite connection, used on the event loop thread only."""

from __future__ import annotations

import sqlite3


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds a lock."""
    message = str(exc)
    return "locked" in message or "busy" in message


class HotSqlite:
    """One connection shared by the per-request key lookup and the inline usage commit.

    Sharing matters: a connection's own commits leave its page cache valid, while a commit from
    any other connection makes its next read fetch every page again. busy_timeout is 0 so the
    event loop never waits on a lock: callers catch `is_busy` errors and take a slower path
    that may wait (a thread, or the async engine)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection, opened on first use."""
        if self._conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=0")
            self._conn = conn
        return self._conn

    def close(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

"""The requests- and tokens-per-minute windows shared by the workers of one `inferd serve --workers N` without
Redis: the same exact sliding window as `MemoryRateLimiter` (`window_wait` decides for both), kept
in a SQLite file that `serve` makes for its workers (and removes when they stop).

Without it every worker would keep its own window and a key's limit would be multiplied by N.
One admission is one short write transaction (no fsync: the file lives as long as the server, as
the in-memory window does), so a worker waits for another only while that one counts a request.
With Redis configured, the Redis window is used instead and this file is never made.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from typing import Sequence

from inferd.limits.base import WINDOW_SECONDS, RateState, tightest, tokens_wait, window_wait
from inferd.store.key_limits import Window

# Set by `serve` for its workers when there is no Redis: the file of their shared window.
FILE_ENV = "INFERD_WORKER_RATE_FILE"

SCHEMA = """
CREATE TABLE IF NOT EXISTS hits (window TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS hits_by_window ON hits (window, at);
CREATE INDEX IF NOT EXISTS hits_by_time ON hits (at);
CREATE TABLE IF NOT EXISTS tokens (window TEXT NOT NULL, at REAL NOT NULL, n INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tokens_by_window ON tokens (window, at);
"""

# Every this many admissions in a worker, one statement drops the hits of every window that left
# the minute: a key never seen again leaves no rows behind (its own window is only cleaned on a hit).
SWEEP_EVERY = 1024


class WorkerRateLimiter:
    """Exact sliding window in a file the workers share: admitted while fewer than `limit`
    requests of the window fall in the last minute (wall-clock time, the same in every worker)."""

    def __init__(self, path: Path, window: float = WINDOW_SECONDS, sweep_every: int = SWEEP_EVERY) -> None:
        self._window = window
        self._sweep_every = sweep_every
        self._since_sweep = 0
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.executescript(SCHEMA)

    async def hit(self, key: str, limit: int, units: int = 1) -> int | None:
        """Count `units` requests in one window; None when admitted, else seconds until enough slots free."""
        wait, _ = await self.admit((Window("key", key, limit, None),), units)
        return wait

    async def admit(self, windows: Sequence[Window], units: int = 1) -> tuple[int | None, RateState]:
        """Check every window's requests and tokens; count the call in all of them only when all admit it."""
        now = time.time()
        db = self._db
        cutoff = now - self._window
        db.execute("BEGIN IMMEDIATE")
        try:
            self._since_sweep += 1
            if self._since_sweep >= self._sweep_every:
                self._since_sweep = 0
                db.execute("DELETE FROM hits WHERE at <= ?", (cutoff,))
                db.execute("DELETE FROM tokens WHERE at <= ?", (cutoff,))
            waits = []
            requests = []
            tokens = []
            for spec in windows:
                if spec.rpm is not None:
                    db.execute("DELETE FROM hits WHERE window = ? AND at <= ?", (spec.name, cutoff))
                    times = [at for (at,) in db.execute("SELECT at FROM hits WHERE window = ? ORDER BY at",
                                                        (spec.name,))]
                    wait = window_wait(len(times), units, spec.rpm, times.__getitem__, now, self._window)
                    if wait is not None:
                        waits.append(wait)
                    requests.append((spec, times))
                if spec.tpm is not None:
                    db.execute("DELETE FROM tokens WHERE window = ? AND at <= ?", (spec.name, cutoff))
                    held = db.execute("SELECT at, n FROM tokens WHERE window = ? ORDER BY at", (spec.name,)).fetchall()
                    total = sum(n for _, n in held)
                    wait = tokens_wait(held, total, spec.tpm, now, self._window)
                    if wait is not None:
                        waits.append(wait)
                    tokens.append((spec.tpm, spec.tpm - total, held[0][0] + self._window - now if held else 0.0))
            admitted = not waits
            states = []
            for spec, times in requests:
                count = len(times)
                if admitted:
                    db.executemany("INSERT INTO hits (window, at) VALUES (?, ?)", [(spec.name, now)] * units)
                    count += units
                oldest = times[0] if times else now
                states.append((spec.rpm or 0, (spec.rpm or 0) - count, oldest + self._window - now))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return (None if admitted else max(waits)), RateState(tightest(states), tightest(tokens))

    async def remaining(self, windows: Sequence[Window]) -> list[tuple[int | None, int | None]]:
        """What is left of each window, counting nothing."""
        cutoff = time.time() - self._window
        left: list[tuple[int | None, int | None]] = []
        for spec in windows:
            requests = tokens = None
            if spec.rpm is not None:
                (held,) = self._db.execute("SELECT count(*) FROM hits WHERE window = ? AND at > ?",
                                           (spec.name, cutoff)).fetchone()
                requests = max(0, spec.rpm - int(held))
            if spec.tpm is not None:
                (used,) = self._db.execute("SELECT coalesce(sum(n), 0) FROM tokens WHERE window = ? AND at > ?",
                                           (spec.name, cutoff)).fetchone()
                tokens = max(0, spec.tpm - int(used))
            left.append((requests, tokens))
        return left

    async def count_tokens(self, windows: Sequence[Window], tokens: int) -> None:
        """Add a finished call's tokens to each window."""
        now = time.time()
        with self._db:
            self._db.executemany("INSERT INTO tokens (window, at, n) VALUES (?, ?, ?)",
                                 [(spec.name, now, tokens) for spec in windows])

    def __len__(self) -> int:
        """How many hits the file holds, of every window."""
        (held,) = self._db.execute("SELECT count(*) FROM hits").fetchone()
        return int(held)

    async def close(self) -> None:
        """Close the file (the command that made it removes it)."""
        self._db.close()

"""The ephemeral purge: conversations created with `ephemeral=true` are deleted, with their
messages, participants, source links and vectors, once older than `[conversations]
ephemeral_ttl_seconds`. Runs in every server; checks at least every min(60, ttl / 5) seconds;
a delete that finds nothing left to delete is harmless, so replicas may race.

The same job keeps stored responses 30 days (`services/responses.py`) and deletes user keys a day
after they expired (`start_key_sweep`): only what it deletes differs."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Awaitable, Callable, Sequence

from inferd.store.db import utcnow
from inferd.store.keys import KeyRepository

log = logging.getLogger("inferd.purge")

DEFAULT_TTL_SECONDS = 86400.0
# How long an expired user key is kept: its caller is told `key_expired` (mint another), not
# `invalid_api_key`, for a day; then the row goes. User keys live an hour by default, a day at most.
EXPIRED_KEY_GRACE_SECONDS = 86400.0

# Deletes what was made before a moment, returns their ids or how many (store/conversations.py
# `ConversationRepository.delete_older_ephemeral`, whose delete hooks remove the sources' links and
# vectors; store/responses.py `ResponseRepository.delete_older`).
DeleteOlder = Callable[[datetime], Awaitable[Sequence[object] | int]]


async def stop_job(task: asyncio.Task[None] | None) -> None:
    """Cancel a background job's task (this purge's, the budget sweep's) and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


def check_interval(ttl_seconds: float) -> float:
    """How often the job looks: min(60, ttl / 5), never busier than 20 times a second."""
    return max(0.05, min(60.0, ttl_seconds / 5))


class EphemeralPurge:
    """The background task that purges expired ephemeral conversations (or `what` else) on a schedule."""

    def __init__(self, delete_older: DeleteOlder, ttl_seconds: float, what: str = "ephemeral conversations") -> None:
        self._delete_older = delete_older
        self._ttl = ttl_seconds
        self._what = what
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> Sequence[object] | int:
        """Purge what has expired now; returns the ids deleted (or how many)."""
        return await self._delete_older(utcnow() - timedelta(seconds=self._ttl))

    def start(self) -> None:
        """Start checking, on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"purge {self._what}")

    async def _run(self) -> None:
        interval = check_interval(self._ttl)
        while True:
            try:
                purged = await self.run_once()
                if purged:
                    log.info("purged %d %s", purged if isinstance(purged, int) else len(purged), self._what)
            except Exception:  # a failed pass (a database restarting) must not end the job
                log.exception("purge of %s failed; retrying in %.1f s", self._what, interval)
            await asyncio.sleep(interval)

    async def close(self) -> None:
        """Stop the task."""
        await stop_job(self._task)
        self._task = None


def start_key_sweep(keys: KeyRepository) -> EphemeralPurge:
    """Start the job that deletes user keys expired more than `EXPIRED_KEY_GRACE_SECONDS` ago
    (on start, then every minute); without it every key the exchange ever minted stays a row."""
    job = EphemeralPurge(keys.delete_expired_user_keys, EXPIRED_KEY_GRACE_SECONDS, "expired user keys")
    job.start()
    return job

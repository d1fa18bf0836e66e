"""The audit log: administrative changes, written in the same transaction as the change they record.

A change and its entry commit together, so the log never claims a change that did not happen nor
misses one that did. The few changes whose store commits them on its own (an admin's cancel of
another key's batch or delete of its file, `orgs create`) are recorded right after they commit
(`AuditLog.record`): never a change that did not happen, but a crash between the two loses the
entry. Entries are per org and read newest first by id (ids only grow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.db import utcnow
from inferd.store.tables import audit_log

CLI_ACTOR = "cli"
# user_key.mint: a key minted on the exchange's second shape (actor: the owning key; target: the user).
# batch.cancel and file.delete: an admin acting on another key's batch or file (details: the owner).
ACTIONS = ("key.create", "key.update", "key.revoke", "org.create", "org.update", "user_key.mint", "batch.cancel",
           "file.delete")
ACTIONS += ("team.create", "team.update", "team.delete")  # target: the team's name
ACTIONS += ("key.rotate",)  # a new secret for the same key id (details: grace_s; never a secret)
ACTIONS += ("cache.clear",)  # the org's response-cache entries emptied (target: the org; details: deleted)


@dataclass(frozen=True)
class AuditEntry:
    """One change to record: who (`actor`), what (`action`), on what (`target`), and how (`details`,
    never a secret)."""

    actor: str
    action: str
    target: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditRecord:
    """A stored entry."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    details: dict[str, Any]


async def write_entry(conn: AsyncConnection, org_id: int, entry: AuditEntry) -> None:
    """Append `entry` to the org's log inside the caller's transaction."""
    if entry.action not in ACTIONS:
        raise ValueError(f"unknown audit action {entry.action!r}")
    await conn.execute(insert(audit_log).values(
        org_id=org_id, at=utcnow(), actor=entry.actor, action=entry.action, target=entry.target,
        details=orjson.dumps(entry.details).decode()))


class AuditLog:
    """Reads `audit_log`, and appends the entries of changes committed on their own."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record(self, org_id: int, entry: AuditEntry) -> None:
        """Append `entry` in a transaction of its own, for a change already committed by a store
        that takes no entry (see the module's docstring)."""
        async with self._engine.begin() as conn:
            await write_entry(conn, org_id, entry)

    async def page(self, org_id: int, limit: int, after: int | None) -> tuple[list[AuditRecord], bool]:
        """Up to `limit` entries of the org older than entry `after` (all when None), newest first,
        and whether older ones remain."""
        stmt = select(audit_log).where(audit_log.c.org_id == org_id)
        if after is not None:
            stmt = stmt.where(audit_log.c.id < after)
        stmt = stmt.order_by(audit_log.c.id.desc()).limit(limit + 1)  # one more tells whether more remain
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        records = [AuditRecord(int(r["id"]), r["at"], r["actor"], r["action"], r["target"],
                               orjson.loads(r["details"])) for r in rows[:limit]]
        return records, len(rows) > limit

"""Conversations, their messages (one row each, with branches) and participants.

Branches: a message's `parent_message_id` makes the messages of a conversation a tree. Exactly
the rows of the visible root-to-leaf path carry `active = true`, so reading a page of the thread
is one indexed range read (conversation_id, active, id), whatever the conversation's size. Ids
grow along every path (a child is written after its parent), which is what keeps the flags cheap
to maintain: the active rows after a message on the path are exactly its active descendants.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Awaitable, Callable, Iterable, Sequence

import orjson
from sqlalchemy import and_, delete, func, insert, or_, select, text, true, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.db import utcnow
from inferd.store.tables import conversation_messages as messages
from inferd.store.tables import conversation_participants as participants
from inferd.store.tables import conversations, users

# Roles that may manage a conversation (delete it, share it, rename or archive it).
MANAGER_ROLES = ("owner", "admin")

# Called inside the delete transaction with the ids being deleted, before the conversations go:
# the sources module removes its links, vectors and attachments there (its tables point here).
DeleteHook = Callable[[AsyncConnection, list[int]], Awaitable[None]]

# An equality, not `IS TRUE`: PostgreSQL uses the (conversation_id, active, id) index only for `=`.
_ACTIVE = messages.c.active == true()

# The parent of a new message and its ancestors up to the first one on the visible path (the
# fork point): the rows a branch switch must turn on. Usually a handful, never the whole thread.
_HIDDEN_ANCESTRY = text("""
WITH RECURSIVE up(id, parent_id, active) AS (
    SELECT id, parent_message_id, active FROM conversation_messages WHERE id = :start
    UNION ALL
    SELECT m.id, m.parent_message_id, m.active FROM conversation_messages m JOIN up ON m.id = up.parent_id
    WHERE up.active = :off
)
SELECT id, active FROM up
""")


_ANCESTRY = text("""
WITH RECURSIVE up(id, parent_id, depth) AS (
    SELECT id, parent_message_id, 1 FROM conversation_messages WHERE id = :start AND conversation_id = :conversation_id
    UNION ALL
    SELECT m.id, m.parent_message_id, up.depth + 1 FROM conversation_messages m JOIN up ON m.id = up.parent_id
    WHERE up.depth < :limit
)
SELECT id FROM up
""")


@dataclass(frozen=True)
class Access:
    """A conversation the caller may see, and the caller's role in it (owner, admin, member…)."""

    conversation: dict[str, Any]
    role: str

    @property
    def can_manage(self) -> bool:
        """Owners and admins may delete, share, rename and archive."""
        return self.role in MANAGER_ROLES


@dataclass(frozen=True)
class NewMessage:
    """A message row to append; `parent_message_id` None appends to the visible leaf."""

    role: str
    message: str
    user_id: int | None
    parent_message_id: int | None = None
    reasoning_content: str | None = None
    model_name: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_status: str | None = None
    finish_reason: str | None = None
    turn_id: str | None = None
    is_read: bool = False
    attachments: list[Any] | None = None
    metadata: dict[str, Any] | None = None
    tool_calls: list[Any] | None = None


@dataclass(frozen=True)
class Page:
    """What the detail shows of a conversation's rows."""

    messages: list[dict[str, Any]]
    has_more: bool
    siblings: dict[int | None, list[int]]
    participants: list[dict[str, Any]]


class MissingParent(LookupError):
    """The named parent message is not a message of this conversation."""


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _visible_to(user_id: int) -> Any:
    shared = select(participants.c.conversation_id).where(participants.c.user_id == user_id)
    return or_(conversations.c.user_id == user_id, conversations.c.id.in_(shared))


class ConversationRepository:
    """Reads and writes the conversation tables."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self.delete_hooks: list[DeleteHook] = []

    async def create(self, *, org_id: int, user_id: int, title: str | None = None, project_id: int | None = None,
                     cloud_agent_task_id: int | None = None, is_ephemeral: bool = False,
                     conversation_type: str | None = None) -> dict[str, Any]:
        """A new conversation owned by `user_id` (who also becomes its `owner` participant)."""
        now = utcnow()
        values = {"org_id": org_id, "user_id": user_id, "title": title, "project_id": project_id,
                  "cloud_agent_task_id": cloud_agent_task_id, "type": conversation_type,
                  "is_ephemeral": is_ephemeral, "archived_at": None, "last_message_at": now, "created_at": now}
        async with self._engine.begin() as conn:
            result = await conn.execute(insert(conversations).values(**values))
            conversation_id = int(result.inserted_primary_key[0])
            await conn.execute(insert(participants).values(conversation_id=conversation_id, user_id=user_id,
                                                           role="owner", joined_at=now))
        return {"id": conversation_id, **values}

    async def access(self, conversation_id: int, user_id: int) -> Access | None:
        """The conversation and the caller's role, or None when it is neither theirs nor shared with them."""
        query = (select(conversations, participants.c.role)
                 .select_from(conversations.outerjoin(participants, and_(
                     participants.c.conversation_id == conversations.c.id, participants.c.user_id == user_id)))
                 .where(conversations.c.id == conversation_id))
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        if row is None:
            return None
        conversation = {k: v for k, v in row.items() if k != "role"}
        if conversation["user_id"] == user_id:
            return Access(conversation, "owner")
        if row["role"] is None:
            return None
        return Access(conversation, str(row["role"]))

    async def list_for(self, user_id: int, project_id: int | None | str, cloud_agents: bool,
                       archived: bool) -> list[dict[str, Any]]:
        """Conversations owned by or shared with the user, newest first (`project_id` "any" = no filter)."""
        query = select(conversations).where(_visible_to(user_id))
        if project_id is None:
            query = query.where(conversations.c.project_id.is_(None))
        elif project_id != "any":
            query = query.where(conversations.c.project_id == project_id)
        agent = conversations.c.cloud_agent_task_id
        query = query.where(agent.is_not(None) if cloud_agents else agent.is_(None))
        archived_at = conversations.c.archived_at
        query = query.where(archived_at.is_not(None) if archived else archived_at.is_(None))
        query = query.order_by(conversations.c.last_message_at.desc(), conversations.c.id.desc())
        async with self._engine.connect() as conn:
            return [dict(row) for row in (await conn.execute(query)).mappings()]

    async def latest_messages(self, conversation_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The newest visible message of each conversation."""
        if not conversation_ids:
            return {}
        # One index probe per conversation (its newest active id), not a max() over every row.
        newest = (select(messages.c.id).where(messages.c.conversation_id == conversations.c.id, _ACTIVE)
                  .order_by(messages.c.id.desc()).limit(1).correlate(conversations).scalar_subquery())
        newest_ids = select(newest).select_from(conversations).where(conversations.c.id.in_(conversation_ids))
        query = select(messages.c.id, messages.c.conversation_id, messages.c.message, messages.c.role,
                       messages.c.created_at).where(messages.c.id.in_(newest_ids))
        async with self._engine.connect() as conn:
            return {row["conversation_id"]: dict(row) for row in (await conn.execute(query)).mappings()}

    async def page(self, conversation_id: int, before_id: int | None, from_id: int | None,
                   limit: int) -> Page:
        """A page of the visible thread with its messages' siblings and the participants, on one connection."""
        async with self._engine.connect() as conn:
            rows, has_more = await self._thread(conn, conversation_id, before_id, from_id, limit)
            siblings = await self._sibling_ids(conn, conversation_id, rows)
            people = await self._participants(conn, conversation_id)
        return Page(rows, has_more, siblings, people)

    async def thread(self, conversation_id: int, before_id: int | None, from_id: int | None,
                     limit: int) -> tuple[list[dict[str, Any]], bool]:
        """A page of the visible thread, oldest first, and whether more lie beyond it."""
        async with self._engine.connect() as conn:
            return await self._thread(conn, conversation_id, before_id, from_id, limit)

    async def _thread(self, conn: AsyncConnection, conversation_id: int, before_id: int | None,
                      from_id: int | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """A page of the visible thread, oldest first, and whether more lie beyond it.

        Without `from_id` the page is the newest `limit` messages (before `before_id` when given);
        with `from_id` it is the `limit` messages after that id (a client catching up)."""
        query = select(messages).where(messages.c.conversation_id == conversation_id, _ACTIVE)
        if before_id is not None:
            query = query.where(messages.c.id < before_id)
        if from_id is not None:
            query = query.where(messages.c.id > from_id).order_by(messages.c.id.asc())
        else:
            query = query.order_by(messages.c.id.desc())
        rows = [dict(row) for row in (await conn.execute(query.limit(limit + 1))).mappings()]
        has_more = len(rows) > limit
        rows = rows[:limit]
        if from_id is None:
            rows.reverse()
        return rows, has_more

    async def sibling_ids(self, conversation_id: int, page: Iterable[dict[str, Any]]) -> dict[int | None, list[int]]:
        """For each parent id of the page (None for roots), the ids of its children, oldest first."""
        async with self._engine.connect() as conn:
            return await self._sibling_ids(conn, conversation_id, page)

    async def _sibling_ids(self, conn: AsyncConnection, conversation_id: int,
                           page: Iterable[dict[str, Any]]) -> dict[int | None, list[int]]:
        parent_ids = {row["parent_message_id"] for row in page}
        if not parent_ids:
            return {}
        real = [p for p in parent_ids if p is not None]
        parent = messages.c.parent_message_id
        # Separate probes of the (conversation_id, parent_message_id) index, never an OR across them.
        wheres = ([parent.in_(real)] if real else []) + ([parent.is_(None)] if None in parent_ids else [])
        siblings: dict[int | None, list[int]] = {p: [] for p in parent_ids}
        for where in wheres:
            query = (select(messages.c.id, messages.c.parent_message_id)
                     .where(messages.c.conversation_id == conversation_id, where).order_by(messages.c.id))
            for message_id, parent_id in (await conn.execute(query)).all():
                siblings[parent_id].append(int(message_id))
        return siblings

    async def message(self, conversation_id: int, message_id: int) -> dict[str, Any] | None:
        """One message of the conversation, or None."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(messages).where(
                messages.c.id == message_id, messages.c.conversation_id == conversation_id))).mappings().first()
        return dict(row) if row else None

    async def ancestry(self, conversation_id: int, message_id: int, limit: int) -> list[dict[str, Any]]:
        """The message and up to `limit - 1` of its ancestors, oldest first (its branch, visible or not)."""
        async with self._engine.connect() as conn:
            ids = [int(r[0]) for r in (await conn.execute(_ANCESTRY, {
                "start": message_id, "conversation_id": conversation_id, "limit": limit})).all()]
            if not ids:
                return []
            rows = await conn.execute(select(messages).where(messages.c.id.in_(ids)).order_by(messages.c.id))
            return [dict(row) for row in rows.mappings()]

    async def participants(self, conversation_id: int) -> list[dict[str, Any]]:
        """Participants with their names and emails, in the order they joined."""
        async with self._engine.connect() as conn:
            return await self._participants(conn, conversation_id)

    async def _participants(self, conn: AsyncConnection, conversation_id: int) -> list[dict[str, Any]]:
        query = (select(participants.c.user_id, participants.c.role, participants.c.joined_at, users.c.email,
                        users.c.given_name, users.c.family_name)
                 .select_from(participants.join(users, users.c.id == participants.c.user_id))
                 .where(participants.c.conversation_id == conversation_id)
                 .order_by(participants.c.joined_at, participants.c.user_id))
        return [dict(row) for row in (await conn.execute(query)).mappings()]

    async def add_participant(self, conversation_id: int, user_id: int, role: str) -> dict[str, Any]:
        """Share the conversation with a user (or change their role); the owner's role stays `owner`."""
        now = utcnow()
        async with self._engine.begin() as conn:
            existing = (await conn.execute(select(participants.c.role, participants.c.joined_at).where(
                participants.c.conversation_id == conversation_id, participants.c.user_id == user_id))).first()
            if existing is None:
                await conn.execute(insert(participants).values(conversation_id=conversation_id, user_id=user_id,
                                                               role=role, joined_at=now))
                return {"user_id": user_id, "role": role, "joined_at": now}
            if existing[0] != "owner":
                await conn.execute(update(participants).where(
                    participants.c.conversation_id == conversation_id, participants.c.user_id == user_id
                ).values(role=role))
                return {"user_id": user_id, "role": role, "joined_at": existing[1]}
            return {"user_id": user_id, "role": "owner", "joined_at": existing[1]}

    async def update(self, conversation_id: int, values: dict[str, Any]) -> None:
        """Change title, archived_at or project_id."""
        async with self._engine.begin() as conn:
            await conn.execute(update(conversations).where(conversations.c.id == conversation_id).values(**values))

    async def append(self, conversation_id: int, new: Sequence[NewMessage]) -> list[dict[str, Any]]:
        """Write messages in order, each the child of the previous one; the first hangs under its
        `parent_message_id` (the visible leaf when None). A second child of a parent starts a branch,
        which becomes the visible one. Raises MissingParent for a parent from elsewhere."""
        written: list[dict[str, Any]] = []
        async with self._engine.begin() as conn:
            # Lock the conversation row (PostgreSQL) so concurrent appends keep one visible path.
            await conn.execute(select(conversations.c.id).where(conversations.c.id == conversation_id)
                               .with_for_update())
            parent_id = await self._attach_point(conn, conversation_id, new[0].parent_message_id)
            for item in new:
                now = utcnow()
                row = {"conversation_id": conversation_id, "user_id": item.user_id, "role": item.role,
                       "message": item.message, "reasoning_content": item.reasoning_content,
                       "model_name": item.model_name, "tool_call_id": item.tool_call_id, "tool_name": item.tool_name,
                       "tool_status": item.tool_status, "finish_reason": item.finish_reason, "turn_id": item.turn_id,
                       "parent_message_id": parent_id, "is_read": item.is_read,
                       "attachments": _json(item.attachments if item.attachments is not None else []),
                       "metadata": _json(item.metadata if item.metadata is not None else {}),
                       "tool_calls": _json(item.tool_calls), "active": True, "created_at": now}
                result = await conn.execute(insert(messages).values(**row))
                parent_id = int(result.inserted_primary_key[0])
                written.append({"id": parent_id, **row})
            await conn.execute(update(conversations).where(conversations.c.id == conversation_id)
                               .values(last_message_at=written[-1]["created_at"]))
        return written

    async def _attach_point(self, conn: AsyncConnection, conversation_id: int, parent_id: int | None) -> int | None:
        """Make room for a new child of `parent_id` on the visible path; returns the parent to use."""
        active = and_(messages.c.conversation_id == conversation_id, _ACTIVE)
        if parent_id is None:
            leaf = (await conn.execute(select(func.max(messages.c.id)).where(active))).scalar()
            return int(leaf) if leaf is not None else None
        found = (await conn.execute(select(messages.c.id).where(
            messages.c.id == parent_id, messages.c.conversation_id == conversation_id))).first()
        if found is None:
            raise MissingParent(parent_id)
        ancestry = (await conn.execute(_HIDDEN_ANCESTRY, {"start": parent_id, "off": False})).all()
        fork = next((int(row[0]) for row in ancestry if row[1]), None)
        hidden = [int(row[0]) for row in ancestry if not row[1]]
        # What follows the fork point on the visible path is the branch being left (ids grow along
        # a path, so it is every active row after the fork); without a fork the whole path goes.
        leaving = and_(active, messages.c.id > fork) if fork is not None else active
        await conn.execute(update(messages).where(leaving).values(active=False))
        for start in range(0, len(hidden), 500):
            await conn.execute(update(messages).where(messages.c.id.in_(hidden[start:start + 500]))
                               .values(active=True))
        return parent_id

    async def owned_or_managed(self, conversation_ids: Sequence[int], user_id: int) -> list[int]:
        """Which of these conversations the user may delete (owner, or owner/admin participant)."""
        if not conversation_ids:
            return []
        managers = select(participants.c.conversation_id).where(participants.c.user_id == user_id,
                                                                participants.c.role.in_(MANAGER_ROLES))
        query = select(conversations.c.id).where(conversations.c.id.in_(conversation_ids), or_(
            conversations.c.user_id == user_id, conversations.c.id.in_(managers)))
        async with self._engine.connect() as conn:
            return sorted(int(row[0]) for row in (await conn.execute(query)).all())

    async def delete(self, conversation_ids: Sequence[int]) -> None:
        """Delete conversations for good: their sources' links and vectors (hooks), messages, participants."""
        ids = list(conversation_ids)
        if not ids:
            return
        async with self._engine.begin() as conn:
            for hook in self.delete_hooks:
                await hook(conn, ids)
            # One statement per table: the messages' parent links are checked at statement end.
            await conn.execute(delete(messages).where(messages.c.conversation_id.in_(ids)))
            await conn.execute(delete(participants).where(participants.c.conversation_id.in_(ids)))
            await conn.execute(delete(conversations).where(conversations.c.id.in_(ids)))

    async def delete_older_ephemeral(self, before: datetime) -> list[int]:
        """Delete ephemeral conversations created before `before`; returns their ids (the purge job)."""
        async with self._engine.connect() as conn:
            ids = [int(r[0]) for r in (await conn.execute(select(conversations.c.id).where(
                conversations.c.is_ephemeral.is_(True), conversations.c.created_at < before))).all()]
        await self.delete(ids)
        return ids

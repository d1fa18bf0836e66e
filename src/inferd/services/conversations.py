"""Saved conversations of end users: who may see what, and the wire shapes of list and detail.

Every read and write starts from `ConversationService.access`, which answers 404 for a
conversation the caller neither owns nor participates in, so nobody learns that it exists.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Protocol, Sequence

import orjson

from inferd.auth.key_record import KeyRecord
from inferd.errors import InvalidRequest, NotFound, PermissionDenied
from inferd.protocol.conversations import MAX_ID
from inferd.store.conversations import Access, ConversationRepository, MissingParent, NewMessage
from inferd.store.db import iso, utcnow
from inferd.store.users import UserRepository

_PATH_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
PARTICIPANT_ROLES = ("admin", "member")


class SourceDirectory(Protocol):
    """What the sources module tells conversations about attached sources."""

    async def for_conversation(self, conversation_id: int, user_id: int) -> list[dict[str, Any]]:
        """Active, non-deleted sources of a conversation as the detail embeds them (redacted unless owner)."""

    async def counts(self, conversation_ids: Sequence[int]) -> dict[int, int]:
        """How many active sources each conversation has."""


def parse_path_id(raw: str) -> int:
    """A conversation id from the path: 400 unless 1-64 of [A-Za-z0-9_-]; a valid id that no
    conversation can have (not a number) is simply not found."""
    if not _PATH_ID.fullmatch(raw):
        raise InvalidRequest("Conversation id must be 1 to 64 letters, digits, '-' or '_'", code="invalid_id")
    if not raw.isdigit() or int(raw) > MAX_ID or int(raw) == 0:
        raise NotFound("Conversation not found", code="conversation_not_found")
    return int(raw)


def _user_of(key: KeyRecord) -> int:
    assert key.user_id is not None  # require_user_key admitted only keys with a user
    return key.user_id


def message_out(row: dict[str, Any], siblings: dict[int | None, list[int]]) -> dict[str, Any]:
    """A message as the detail shows it: never the assistant `tool_calls` array."""
    return {
        "id": row["id"], "conversation_id": row["conversation_id"], "user_id": row["user_id"],
        "message": row["message"], "reasoning_content": row["reasoning_content"], "role": row["role"],
        "created_at": iso(row["created_at"]), "is_read": bool(row["is_read"]),
        "attachments": orjson.loads(row["attachments"]) if row["attachments"] else [],
        "model_name": row["model_name"], "tool_call_id": row["tool_call_id"], "tool_name": row["tool_name"],
        "tool_status": row["tool_status"], "finish_reason": row["finish_reason"], "turn_id": row["turn_id"],
        "parent_message_id": row["parent_message_id"], "active_sibling_message": bool(row["active"]),
        "sibling_ids": siblings.get(row["parent_message_id"], [row["id"]]),
        "metadata": orjson.loads(row["metadata"]) if row["metadata"] else {},
    }


def conversation_out(row: dict[str, Any], source_count: int = 0) -> dict[str, Any]:
    """A conversation list item."""
    return {
        "id": row["id"], "user_id": row["user_id"], "title": row["title"], "project_id": row["project_id"],
        "cloud_agent_task_id": row["cloud_agent_task_id"],
        "archived_at": iso(row["archived_at"]) if row["archived_at"] else None,
        "last_message_at": iso(row["last_message_at"]), "created_at": iso(row["created_at"]),
        "is_ephemeral": bool(row["is_ephemeral"]), "source_count": source_count, "type": row["type"],
    }


def participant_out(row: dict[str, Any]) -> dict[str, Any]:
    """A participant with the names the identity provider gave."""
    return {"user_id": row["user_id"], "role": row["role"], "first_name": row.get("given_name"),
            "last_name": row.get("family_name"), "email": row.get("email"), "joined_at": iso(row["joined_at"])}


class ConversationService:
    """List, read, create, share, update and delete conversations for the calling user."""

    def __init__(self, store: ConversationRepository, users: UserRepository,
                 sources: SourceDirectory | None = None) -> None:
        self.store = store
        self._users = users
        self.sources = sources
        self.running_turns: set[asyncio.Task[None]] = set()  # generate turns still streaming

    async def access(self, key: KeyRecord, conversation_id: int) -> Access:
        """The conversation and the caller's role; 404 when neither owned nor shared."""
        found = await self.store.access(conversation_id, _user_of(key))
        if found is None or found.conversation["org_id"] != key.org_id:
            raise NotFound("Conversation not found", code="conversation_not_found")
        return found

    async def list(self, key: KeyRecord, project_id: int | None | str, cloud_agents: bool,
                   archived: bool) -> tuple[list[dict[str, Any]], list[str]]:
        """List items (each embedding its latest message) and the distinct `type` values among them."""
        rows = await self.store.list_for(_user_of(key), project_id, cloud_agents, archived)
        ids = [row["id"] for row in rows]
        latest = await self.store.latest_messages(ids)
        counts = await self.sources.counts(ids) if self.sources is not None else {}
        items = []
        for row in rows:
            item = conversation_out(row, counts.get(row["id"], 0))
            newest = latest.get(row["id"])
            item["messages"] = [] if newest is None else [{
                "id": newest["id"], "conversation_id": row["id"], "message": newest["message"],
                "role": newest["role"], "created_at": iso(newest["created_at"])}]
            items.append(item)
        types = sorted({row["type"] for row in rows if row["type"] is not None})
        return items, types

    async def detail(self, key: KeyRecord, conversation_id: int, before_id: int | None, from_id: int | None,
                     limit: int) -> dict[str, Any]:
        """The visible thread of the active branch (one page), participants and sources."""
        found = await self.access(key, conversation_id)
        page = await self.store.page(conversation_id, before_id, from_id, limit)
        sources = (await self.sources.for_conversation(conversation_id, _user_of(key))
                   if self.sources is not None else [])
        row = found.conversation
        return {
            **conversation_out(row, len(sources)),
            "sources": sources,
            "participants": [participant_out(p) for p in page.participants],
            "messages": [message_out(m, page.siblings) for m in page.messages],
            "has_more": page.has_more,
            "role": found.role,
        }

    async def create(self, key: KeyRecord, title: str | None, project_id: int | None,
                     cloud_agent_task_id: int | None, is_ephemeral: bool = False) -> dict[str, Any]:
        """A new conversation owned by the caller."""
        row = await self.store.create(org_id=key.org_id, user_id=_user_of(key), title=title, project_id=project_id,
                                      cloud_agent_task_id=cloud_agent_task_id, is_ephemeral=is_ephemeral,
                                      conversation_type="cloud_agent" if cloud_agent_task_id is not None else "chat")
        return {**conversation_out(row), "messages": []}

    async def add_user_message(self, key: KeyRecord, conversation_id: int, message: str,
                               parent_message_id: int | None, attachments: list[Any] | None,
                               metadata: dict[str, Any] | None) -> dict[str, Any]:
        """Save a user message; a second child of one parent starts a branch that becomes the visible one."""
        await self.access(key, conversation_id)
        new = NewMessage(role="user", message=message, user_id=_user_of(key), parent_message_id=parent_message_id,
                         is_read=True, attachments=attachments, metadata=metadata)
        try:
            [row] = await self.store.append(conversation_id, [new])
        except MissingParent:
            raise NotFound("parent_message_id is not a message of this conversation",
                           code="message_not_found") from None
        siblings = await self.store.sibling_ids(conversation_id, [row])
        return message_out(row, siblings)

    async def add_participant(self, key: KeyRecord, conversation_id: int, email: str, role: str) -> dict[str, Any]:
        """Share with the org's user who has this email (created when unknown); owners and admins only."""
        found = await self.access(key, conversation_id)
        if not found.can_manage:
            raise PermissionDenied("Only the owner or an admin may add participants", code="not_conversation_admin")
        user_id = await self._users.get_or_create_by_email(key.org_id, email)
        added = await self.store.add_participant(conversation_id, user_id, role)
        people = {p["user_id"]: p for p in await self.store.participants(conversation_id)}
        return participant_out({**people.get(user_id, {}), **added})

    async def update(self, key: KeyRecord, conversation_id: int, changes: dict[str, Any]) -> dict[str, Any]:
        """Rename, archive or unarchive, move between projects; owners and admins only."""
        found = await self.access(key, conversation_id)
        if not found.can_manage:
            raise PermissionDenied("Only the owner or an admin may change the conversation",
                                   code="not_conversation_admin")
        values: dict[str, Any] = {}
        if "title" in changes:
            values["title"] = changes["title"]
        if "project_id" in changes:
            values["project_id"] = changes["project_id"]
        if "archived" in changes and changes["archived"] is not None:
            was = found.conversation["archived_at"]
            values["archived_at"] = (was or utcnow()) if changes["archived"] else None
        if values:
            await self.store.update(conversation_id, values)
        return conversation_out({**found.conversation, **values})

    async def delete(self, key: KeyRecord, conversation_ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """Partial delete: (deleted, skipped); 404 when nothing is deletable."""
        wanted = list(dict.fromkeys(conversation_ids))
        allowed = set(await self.store.owned_or_managed(wanted, _user_of(key)))
        deletable = [cid for cid in wanted if cid in allowed]
        if not deletable:
            raise NotFound("No conversation in conversation_ids can be deleted by this user",
                           code="conversation_not_found")
        await self.store.delete(deletable)
        return deletable, [cid for cid in wanted if cid not in allowed]

"""Typed results of the user-scoped routes: conversations, messages, sources, generate frames."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

from inferd_client._base import APIObject

T = TypeVar("T", bound=APIObject)


def unwrap(body: Mapping[str, Any], key: str, cls: type[T]) -> T:
    """`cls` built from `body[key]` when the application envelope wraps it there, else from `body`."""
    inner = body.get(key)
    return cls.from_dict(inner if isinstance(inner, Mapping) else body)


class ConversationMessage(APIObject):
    """One stored message row (user, assistant or tool)."""

    id: int = 0
    conversation_id: int = 0
    user_id: int | None = None
    message: str | None = None
    reasoning_content: str | None = None
    role: str = ""
    model_name: str | None = None  # the model that wrote an assistant message
    created_at: str = ""
    is_read: bool | None = None
    attachments: list[Any] = dataclasses.field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_status: str | None = None
    finish_reason: str | None = None
    turn_id: str | None = None
    parent_message_id: int | None = None
    active_sibling_message: bool | None = None
    sibling_ids: list[int] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] | None = None


class Participant(APIObject):
    """A user a conversation is shared with, and their role."""

    user_id: int = 0
    role: str = ""
    first_name: str | None = None
    last_name: str | None = None
    email: str | None = None
    joined_at: str | None = None


class Source(APIObject):
    """A source row (also the shape embedded in a conversation detail, with fewer fields)."""

    id: int = 0
    source_type: str = ""
    source_name: str | None = None
    source_config: dict[str, Any] | None = None
    handler: str | None = None
    source_description: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    metadata: dict[str, Any] | None = None
    host_identifier: str | None = None
    conversation_id: int | None = None
    is_active: bool | None = None
    use_in_tasks: bool | None = None
    is_owner: bool = False
    source_origin: str | None = None


class _ConversationFields(APIObject):
    """The conversation row itself, as listed and in its detail."""

    id: int = 0
    user_id: int = 0
    title: str | None = None
    project_id: int | None = None
    cloud_agent_task_id: int | None = None
    archived_at: str | None = None
    last_message_at: str | None = None
    created_at: str | None = None


class ConversationListItem(_ConversationFields):
    """A conversation as listed; `messages` holds the latest message when the server embeds it."""

    is_ephemeral: bool = False
    source_count: int = 0
    type: str | None = None
    messages: list[ConversationMessage] = dataclasses.field(default_factory=list)


class ConversationList(APIObject):
    """`GET /v1/conversations`: `{success, body, total: {types}}`."""

    success: bool = True
    body: list[ConversationListItem] = dataclasses.field(default_factory=list)
    total: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def types(self) -> list[str]:
        """`total.types`."""
        return list(self.total.get("types") or [])


class Conversation(_ConversationFields):
    """A conversation's detail: the visible thread of its active branch, sources, participants."""

    sources: list[Source] = dataclasses.field(default_factory=list)
    participants: list[Participant] = dataclasses.field(default_factory=list)
    messages: list[ConversationMessage] = dataclasses.field(default_factory=list)


class SourceList(APIObject):
    """`GET /v1/conversations/{id}/sources` and `GET /v1/sources`: `{success, body, total}`."""

    success: bool = True
    body: list[Source] = dataclasses.field(default_factory=list)
    total: Any = None


class DeleteResult(APIObject):
    """`POST /v1/conversations/delete` (partial delete)."""

    success: bool = True
    message: str | None = None
    total: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def deleted_ids(self) -> list[int]:
        """Ids that were deleted."""
        return list(self.total.get("deleted_ids") or [])

    @property
    def skipped_ids(self) -> list[int]:
        """Ids the caller may not delete (or that do not exist)."""
        return list(self.total.get("skipped_ids") or [])


class VectorizeResult(APIObject):
    """`POST /v1/conversations/{id}/files/vectorize`: `created` is True on 201, False on a 200 duplicate."""

    success: bool = True
    source: Source | None = None
    total: dict[str, Any] = dataclasses.field(default_factory=dict)
    created: bool = True

    @property
    def duplicate(self) -> bool:
        """True when the same content was already ingested by this user (`total.duplicate`)."""
        return bool(self.total.get("duplicate")) if isinstance(self.total, dict) else False

    @property
    def conversation_id(self) -> int | None:
        """The conversation the file landed in, wherever the body reports it."""
        for holder in (self.raw, self.total, self.raw.get("body"), self.raw.get("data")):
            if isinstance(holder, dict) and isinstance(holder.get("conversation_id"), int):
                return int(holder["conversation_id"])
        return None


class GenerateStart(APIObject):
    """The first frame of a generate stream: the conversation and its current title."""

    conversation_id: int = 0
    title: str | None = None


class GenerateChunk(APIObject):
    """A piece of the reply's text."""

    chunk: str = ""


class GenerateEvent(APIObject):
    """Any other frame (agentic events: sources attached, tools, web search); read it from `raw`."""


def parse_generate_frame(payload: Any) -> GenerateStart | GenerateChunk | GenerateEvent:
    """Classify one decoded frame of the generate stream."""
    if isinstance(payload, dict) and "chunk" in payload:
        return GenerateChunk.from_dict(payload)
    if isinstance(payload, dict) and "conversation_id" in payload and "title" in payload:
        return GenerateStart.from_dict(payload)
    return GenerateEvent.from_dict(payload if isinstance(payload, dict) else {"data": payload})

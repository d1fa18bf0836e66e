"""Wire schemas of the conversation routes (spec "Conversation endpoints")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

# The largest values the id columns hold (store/tables.py): conversations, sources and projects
# are 32-bit integers on PostgreSQL, messages 64-bit. A larger id names nothing; sent on to the
# database it would be an error there, not a miss.
MAX_ID = 2**31 - 1
MAX_BIG_ID = 2**63 - 1


class CreateConversation(BaseModel):
    """POST /v1/conversations (extension route)."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, max_length=512)
    project_id: StrictInt | None = Field(None, ge=1, le=MAX_ID)
    cloud_agent_task_id: StrictInt | None = Field(None, ge=1, le=MAX_ID)


class CreateMessage(BaseModel):
    """POST /v1/conversations/{id}/messages: a user message; parent omitted = after the visible leaf."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=1_000_000)
    parent_message_id: StrictInt | None = Field(None, ge=1, le=MAX_BIG_ID)
    attachments: list[Any] | None = None
    metadata: dict[str, Any] | None = None


class AddParticipant(BaseModel):
    """POST /v1/conversations/{id}/participants (owner or admin only)."""

    model_config = ConfigDict(extra="forbid")

    email: str = Field(min_length=3, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")
    role: Literal["admin", "member"] = "member"


class UpdateConversation(BaseModel):
    """PATCH /v1/conversations/{id} (owner or admin only)."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, max_length=512)
    archived: StrictBool | None = None
    project_id: StrictInt | None = Field(None, ge=1, le=MAX_ID)


class DeleteConversations(BaseModel):
    """POST /v1/conversations/delete: integers, or strings of digits."""

    model_config = ConfigDict(extra="forbid")

    conversation_ids: list[StrictInt | str] = Field(min_length=1, max_length=1000)


class LatestMessage(BaseModel):
    id: int
    conversation_id: int
    message: str
    role: str
    created_at: str


class ConversationListItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: int
    user_id: int
    title: str | None
    project_id: int | None
    cloud_agent_task_id: int | None
    archived_at: str | None
    last_message_at: str
    created_at: str
    is_ephemeral: bool
    source_count: int
    type: str | None
    messages: list[LatestMessage] = []


class ConversationTotals(BaseModel):
    types: list[str]


class ConversationList(BaseModel):
    success: bool
    body: list[ConversationListItem]
    total: ConversationTotals


class Message(BaseModel):
    id: int
    conversation_id: int
    user_id: int | None
    message: str
    reasoning_content: str | None
    role: str
    created_at: str
    is_read: bool
    attachments: list[Any]
    model_name: str | None
    tool_call_id: str | None
    tool_name: str | None
    tool_status: str | None
    finish_reason: str | None
    turn_id: str | None
    parent_message_id: int | None
    active_sibling_message: bool
    sibling_ids: list[int]
    metadata: dict[str, Any]


class Participant(BaseModel):
    user_id: int
    role: str
    first_name: str | None
    last_name: str | None
    email: str | None
    joined_at: str


class ConversationDetail(ConversationListItem):
    sources: list[dict[str, Any]]
    participants: list[Participant]
    messages: list[Message] = []  # type: ignore[assignment]
    has_more: bool


class ConversationDetailEnvelope(BaseModel):
    success: bool
    conversation: ConversationDetail


class DeleteTotals(BaseModel):
    deleted_ids: list[int]
    skipped_ids: list[int]


class DeleteResult(BaseModel):
    success: bool
    message: str
    total: DeleteTotals

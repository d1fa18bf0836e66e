"""Saved conversations (user keys only): list, detail, delete, and inferd's extension routes."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse

from inferd.api.deps import metered_user_key, services, user_key
from inferd.auth.key_record import KeyRecord
from inferd.errors import InvalidRequest
from inferd.protocol.conversations import (MAX_BIG_ID, MAX_ID, AddParticipant, ConversationDetailEnvelope, ConversationList,
                                           CreateConversation, CreateMessage, DeleteConversations, DeleteResult,
                                           UpdateConversation)
from inferd.services.conversations import parse_path_id

router = APIRouter(tags=["conversations"])


def _json(payload: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _flag(name: str, raw: str | None) -> bool:
    if raw is None or raw == "false":
        return False
    if raw == "true":
        return True
    raise InvalidRequest(f"{name}: only 'true' (or 'false') is accepted", param=name)


def _project_filter(raw: str | None) -> int | None | str:
    if raw is None:
        return "any"
    if raw == "none":
        return None
    if raw.isdigit() and 0 < int(raw) <= MAX_ID:
        return int(raw)
    raise InvalidRequest("project_id: a project id, or 'none' for conversations without a project",
                         param="project_id")


@router.get("/v1/conversations", response_model=ConversationList)
async def list_conversations(request: Request, project_id: str | None = None, cloud_agents: str | None = None,
                             archived: str | None = None, key: KeyRecord = Depends(user_key)) -> Response:
    """Conversations owned by or shared with the caller, newest first, each with its latest message."""
    items, types = await services(request).conversations.list(
        key, _project_filter(project_id), _flag("cloud_agents", cloud_agents), _flag("archived", archived))
    return _json({"success": True, "body": items, "total": {"types": types}})


@router.post("/v1/conversations", status_code=201)
async def create_conversation(request: Request, body: CreateConversation,
                              key: KeyRecord = Depends(user_key)) -> Response:
    """A new conversation owned by the caller (extension route)."""
    conversation = await services(request).conversations.create(key, body.title, body.project_id,
                                                                 body.cloud_agent_task_id)
    return _json({"success": True, "conversation": conversation}, 201)


@router.post("/v1/conversations/delete", response_model=DeleteResult)
async def delete_conversations(request: Request, body: DeleteConversations,
                               key: KeyRecord = Depends(user_key)) -> Response:
    """Partial delete: what the caller may delete goes, the rest is reported as skipped."""
    ids: list[int] = []
    beyond: list[int] = []  # larger than any conversation id: nothing to delete
    for raw in body.conversation_ids:
        if isinstance(raw, str) and not (raw.isdigit() and len(raw) <= 18):
            raise InvalidRequest("conversation_ids: integers or strings of digits", param="conversation_ids")
        if int(raw) < 1:
            raise InvalidRequest("conversation_ids: ids are positive", param="conversation_ids")
        (ids if int(raw) <= MAX_ID else beyond).append(int(raw))
    deleted, skipped = await services(request).conversations.delete(key, ids)
    skipped = [*skipped, *beyond]
    return _json({"success": True, "message": f"Deleted {len(deleted)} conversation(s)",
                  "total": {"deleted_ids": deleted, "skipped_ids": skipped}})


@router.get("/v1/conversations/{conversation_id}", response_model=ConversationDetailEnvelope)
async def get_conversation(request: Request, conversation_id: str,
                           before_id: int | None = Query(None, ge=1, le=MAX_BIG_ID),
                           from_id: int | None = Query(None, ge=0, le=MAX_BIG_ID),
                           limit: int = Query(20, ge=1, le=500), key: KeyRecord = Depends(user_key)) -> Response:
    """One page of the visible thread of the active branch, with participants and sources."""
    detail = await services(request).conversations.detail(key, parse_path_id(conversation_id), before_id,
                                                          from_id, limit)
    return _json({"success": True, "conversation": detail})


@router.patch("/v1/conversations/{conversation_id}")
async def update_conversation(request: Request, conversation_id: str, body: UpdateConversation,
                              key: KeyRecord = Depends(user_key)) -> Response:
    """Rename, archive or move a conversation (owner or admin)."""
    changes = body.model_dump(include=body.model_fields_set)
    conversation = await services(request).conversations.update(key, parse_path_id(conversation_id), changes)
    return _json({"success": True, "conversation": conversation})


@router.post("/v1/conversations/{conversation_id}/messages", status_code=201)
async def add_message(request: Request, conversation_id: str, body: CreateMessage,
                      key: KeyRecord = Depends(user_key)) -> Response:
    """Save a user message (a second child of one parent starts a branch, which becomes visible)."""
    message = await services(request).conversations.add_user_message(
        key, parse_path_id(conversation_id), body.message, body.parent_message_id, body.attachments, body.metadata)
    return _json({"success": True, "message": message}, 201)


@router.post("/v1/conversations/{conversation_id}/participants", status_code=201)
async def add_participant(request: Request, conversation_id: str, body: AddParticipant,
                          key: KeyRecord = Depends(user_key)) -> Response:
    """Share the conversation with a user of the org, by email (owner or admin)."""
    participant = await services(request).conversations.add_participant(
        key, parse_path_id(conversation_id), body.email, body.role)
    return _json({"success": True, "participant": participant}, 201)


async def _generate_body(request: Request) -> dict[str, Any]:
    """`conversation_id` and `message_id` from a JSON or a form (multipart) body."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        fields: dict[str, Any] = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
    else:
        raw = await request.body()
        try:
            fields = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"Malformed JSON body: {exc}", code="invalid_json") from exc
        if not isinstance(fields, dict):
            raise InvalidRequest("The body must be a JSON object")
    parsed: dict[str, Any] = {}
    for name in ("conversation_id", "message_id"):
        value = fields.get(name)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if value is None and name == "conversation_id":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_BIG_ID:
            raise InvalidRequest(f"{name}: an integer from 1 to {MAX_BIG_ID} is required", param=name)
        parsed[name] = value
    return parsed


_GENERATE_BODY = {"type": "object", "required": ["message_id"], "properties": {
    "conversation_id": {"type": "integer", "minimum": 1, "maximum": MAX_BIG_ID},
    "message_id": {"type": "integer", "minimum": 1, "maximum": MAX_BIG_ID}}}


# The body is read by hand (_generate_body), so the document says what it may be: JSON or a form.
@router.post("/v1/conversations/{conversation_id}/generate", response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}}},
             openapi_extra={"requestBody": {"required": True, "content": {
                 media: {"schema": _GENERATE_BODY} for media in (
                     "application/json", "multipart/form-data", "application/x-www-form-urlencoded")}}})
async def generate(request: Request, conversation_id: str, model: str = Query(min_length=1, max_length=256),
                   thinking: str | None = None, web_search: str | None = Query(
                       None, alias="webSearch", description="`true`: also search the web (for an org with web "
                       "search on, when the server has a `[web_search]` provider; ignored otherwise)"),
                   key: KeyRecord = Depends(metered_user_key)) -> StreamingResponse:
    """Answer a saved user message: SSE `{conversation_id, title}`, `{chunk}` and agentic frames, `[DONE]`."""
    cid = parse_path_id(conversation_id)
    body = await _generate_body(request)
    if body.get("conversation_id", cid) != cid:
        raise InvalidRequest("conversation_id in the body differs from the path", param="conversation_id")
    search = _flag("webSearch", web_search)
    think = thinking is None or _flag("thinking", thinking)
    svc = services(request)
    if search and svc.generation.web is not None:  # honoured only for an org with web search on
        org = await svc.orgs.get_by_slug(key.org_slug)
        search = org is not None and org.web_search
    turn = await svc.generation.prepare(key, cid, body["message_id"], model, think,
                                        search and svc.generation.web is not None)
    return StreamingResponse(turn.frames(svc.conversations.running_turns), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

"""One builder per route of the spec (and inferd's extension routes): each returns a `Call`.

Reads (`read=True`) are GET requests plus `count_tokens`, which is free and writes nothing;
they are retried on 429, 5xx and connection failures. Everything else is sent once.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import httpx

from inferd_client import _calls as c
from inferd_client._calls import NOT_GIVEN, Call, FileSource, NotGiven, Upload, as_bytes, as_object, segment
from inferd_client._errors import ClientValidationError
from inferd_client._conversation_types import (Conversation, ConversationList, ConversationMessage, DeleteResult,
                                               Participant, Source, SourceList, VectorizeResult, unwrap)
from inferd_client._me_types import Me
from inferd_client._types import (Batch, BatchPage, ChatCompletion, EmbeddingList, ExchangeResult, FileDeleted,
                                  FileObject, ImagesResponse, ModelList, RerankResponse, TokenCount, Transcription,
                                  UsagePage, UsageSummary, VoiceList)

# --- inference ------------------------------------------------------------------------------


def chat(model: str, messages: Sequence[Mapping[str, Any]], stream: bool,
         params: Mapping[str, Any]) -> Call[ChatCompletion]:
    """`POST /v1/chat/completions`; other fields are passed through untouched."""
    c.check_metadata(params.get("metadata"))
    body = {**params, "model": model, "messages": c.messages_list(messages)}
    if stream:
        body["stream"] = True
    return Call("POST", "/v1/chat/completions", as_object(ChatCompletion), json=body)


def count_tokens(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> Call[TokenCount]:
    """`POST /v1/chat/count_tokens`: free and side-effect free, so retried like a read."""
    body = {**params, "model": model, "messages": c.messages_list(messages)}
    return Call("POST", "/v1/chat/count_tokens", as_object(TokenCount), read=True, json=body)


def embeddings(model: str, input: str | Sequence[str], params: Mapping[str, Any]) -> Call[EmbeddingList]:
    """`POST /v1/embeddings`."""
    body = {**params, "model": model, "input": input if isinstance(input, str) else list(input)}
    return Call("POST", "/v1/embeddings", as_object(EmbeddingList), json=body)


def rerank(model: str, query: str, documents: Sequence[str], top_n: int | None,
           params: Mapping[str, Any]) -> Call[RerankResponse]:
    """`POST /v1/rerank`."""
    body = {**params, **c.clean({"model": model, "query": query, "documents": list(documents), "top_n": top_n})}
    return Call("POST", "/v1/rerank", as_object(RerankResponse), json=body)


def models() -> Call[ModelList]:
    """`GET /v1/models`."""
    return Call("GET", "/v1/models", as_object(ModelList), read=True)


def speech(model: str, input: str, voice: str, params: Mapping[str, Any]) -> Call[bytes]:
    """`POST /v1/audio/speech`: the audio bytes."""
    return Call("POST", "/v1/audio/speech", as_bytes, json={**params, "model": model, "input": input, "voice": voice})


def _transcript(response: httpx.Response) -> Transcription | str:
    if response.headers.get("content-type", "").startswith("application/json"):
        return Transcription.from_dict(c.body_json(response))
    return response.text


def transcription(file: FileSource, model: str, fields: Mapping[str, Any]) -> Call[Transcription | str]:
    """`POST /v1/audio/transcriptions`: query `model` picks the deployment, form fields go to the engine."""
    data = {k: str(v) for k, v in c.clean(fields).items()}
    return Call("POST", "/v1/audio/transcriptions", _transcript, params={"model": model}, data=data,
                upload=Upload("file", file))


def voices(model: str) -> Call[VoiceList]:
    """`GET /v1/voices`."""
    return Call("GET", "/v1/voices", lambda r: VoiceList.parse(c.body_json(r)), read=True, params={"model": model})


def images(model: str, prompt: str, size: str, params: Mapping[str, Any],
           timeout: float | None) -> Call[ImagesResponse]:
    """`POST /v1/images/generations` (synchronous, so a long timeout by default)."""
    body = {**params, "model": model, "prompt": prompt, "size": size}
    return Call("POST", "/v1/images/generations", as_object(ImagesResponse), json=body,
                timeout=timeout if timeout is not None else c.IMAGE_TIMEOUT)


# --- usage and key exchange -----------------------------------------------------------------


def usage(filters: Mapping[str, Any]) -> Call[UsagePage]:
    """`GET /v1/usage`."""
    return Call("GET", "/v1/usage", as_object(UsagePage), read=True, params=c.usage_params(filters))


def usage_summary(group_by: str, filters: Mapping[str, Any]) -> Call[UsageSummary]:
    """`GET /v1/usage/summary`."""
    params = {**c.usage_params(filters), "group_by": group_by}
    return Call("GET", "/v1/usage/summary", as_object(UsageSummary), read=True, params=params)


def exchange(idp_token: str | None, api_key: str | None, ttl_seconds: int | None) -> Call[ExchangeResult]:
    """`POST /v1/auth/exchange`, shape A or B."""
    return Call("POST", "/v1/auth/exchange", lambda r: ExchangeResult.parse(c.body_json(r)),
                json=c.exchange_body(idp_token, api_key, ttl_seconds))


def me() -> Call[Me]:
    """`GET /v1/me`: the calling key, its models and what is left of its windows and budgets."""
    return Call("GET", "/v1/me", as_object(Me), read=True)


# --- conversations and sources (user-scoped key) ---------------------------------------------


def list_conversations(project_id: str | int | None, cloud_agents: bool, archived: bool) -> Call[ConversationList]:
    """`GET /v1/conversations`."""
    params = c.clean({"project_id": None if project_id is None else str(project_id),
                      "cloud_agents": "true" if cloud_agents else None, "archived": "true" if archived else None})
    return Call("GET", "/v1/conversations", as_object(ConversationList), read=True, params=params)


def get_conversation(conversation_id: str | int, before_id: int | None, from_id: int | None,
                     limit: int | None) -> Call[Conversation]:
    """`GET /v1/conversations/{id}`."""
    params = c.clean({"before_id": before_id, "from_id": from_id, "limit": limit})
    return Call("GET", f"/v1/conversations/{segment(conversation_id)}",
                lambda r: unwrap(c.body_json(r), "conversation", Conversation), read=True, params=params)


def conversation_sources(conversation_id: str | int) -> Call[SourceList]:
    """`GET /v1/conversations/{id}/sources`."""
    return Call("GET", f"/v1/conversations/{segment(conversation_id)}/sources", as_object(SourceList), read=True)


def generate(conversation_id: int, message_id: int, model: str, thinking: bool | None,
             web_search: bool | None) -> Call[Any]:
    """`POST /v1/conversations/{id}/generate` (an SSE stream)."""
    params = c.clean({"model": model, "thinking": None if thinking is None else str(thinking).lower(),
                      "webSearch": None if web_search is None else str(web_search).lower()})
    return Call("POST", f"/v1/conversations/{segment(conversation_id)}/generate", c.body_json, params=params,
                json={"conversation_id": conversation_id, "message_id": message_id})


def delete_conversations(conversation_ids: Sequence[int | str]) -> Call[DeleteResult]:
    """`POST /v1/conversations/delete` (partial: see `deleted_ids` and `skipped_ids`)."""
    if isinstance(conversation_ids, (str, bytes)) or not list(conversation_ids):
        raise ClientValidationError("conversation_ids: a non-empty list of ids")
    return Call("POST", "/v1/conversations/delete", as_object(DeleteResult),
                json={"conversation_ids": list(conversation_ids)})


def _vectorized(response: httpx.Response) -> VectorizeResult:
    result = VectorizeResult.from_dict(c.body_json(response))
    result.created = response.status_code == 201
    return result


def vectorize(conversation_id: int, file: FileSource, ephemeral: bool | None) -> Call[VectorizeResult]:
    """`POST /v1/conversations/{id}/files/vectorize`; id 0 makes the server create a conversation."""
    params = c.clean({"ephemeral": None if ephemeral is None else str(ephemeral).lower()})
    return Call("POST", f"/v1/conversations/{segment(conversation_id)}/files/vectorize", _vectorized,
                params=params, upload=Upload("file", file))


def list_sources() -> Call[SourceList]:
    """`GET /v1/sources`."""
    return Call("GET", "/v1/sources", as_object(SourceList), read=True)


def create_conversation(title: str | None, project_id: int | None,
                        cloud_agent_task_id: int | None) -> Call[Conversation]:
    """`POST /v1/conversations`."""
    body = c.clean({"title": title, "project_id": project_id, "cloud_agent_task_id": cloud_agent_task_id})
    return Call("POST", "/v1/conversations", lambda r: unwrap(c.body_json(r), "conversation", Conversation),
                json=body)


def add_message(conversation_id: int | str, message: str, parent_message_id: int | None) -> Call[ConversationMessage]:
    """`POST /v1/conversations/{id}/messages`: a user message (a second child of one parent branches)."""
    body = c.clean({"message": message, "parent_message_id": parent_message_id})
    return Call("POST", f"/v1/conversations/{segment(conversation_id)}/messages",
                lambda r: unwrap(c.body_json(r), "message", ConversationMessage), json=body)


def add_participant(conversation_id: int | str, email: str, role: str) -> Call[Participant]:
    """`POST /v1/conversations/{id}/participants` (owner or admin only)."""
    return Call("POST", f"/v1/conversations/{segment(conversation_id)}/participants",
                lambda r: unwrap(c.body_json(r), "participant", Participant), json={"email": email, "role": role})


def update_conversation(conversation_id: int | str, title: str | None | NotGiven, archived: bool | NotGiven,
                        project_id: int | None | NotGiven) -> Call[Conversation]:
    """`PATCH /v1/conversations/{id}`: only the fields given are sent (None clears title or project)."""
    body = {k: v for k, v in {"title": title, "archived": archived, "project_id": project_id}.items()
            if v is not NOT_GIVEN}
    return Call("PATCH", f"/v1/conversations/{segment(conversation_id)}",
                lambda r: unwrap(c.body_json(r), "conversation", Conversation), json=body)


def update_source(source_id: int | str, is_active: bool | None, use_in_tasks: bool | None) -> Call[Source]:
    """`PATCH /v1/sources/{id}` (the source's owner)."""
    return Call("PATCH", f"/v1/sources/{segment(source_id)}", lambda r: unwrap(c.body_json(r), "source", Source),
                json=c.clean({"is_active": is_active, "use_in_tasks": use_in_tasks}))


# --- files and batches ----------------------------------------------------------------------


def create_file(file: FileSource, purpose: str) -> Call[FileObject]:
    """`POST /v1/files`; the purpose is checked before any request."""
    c.check_file_purpose(purpose)
    return Call("POST", "/v1/files", as_object(FileObject), data={"purpose": purpose},
                upload=Upload("file", file, "application/jsonl"))


def get_file(file_id: str) -> Call[FileObject]:
    """`GET /v1/files/{id}`."""
    c.check_batch_id(file_id)
    return Call("GET", f"/v1/files/{segment(file_id)}", as_object(FileObject), read=True)


def get_file_content(file_id: str) -> Call[bytes]:
    """`GET /v1/files/{id}/content`."""
    c.check_batch_id(file_id)
    return Call("GET", f"/v1/files/{segment(file_id)}/content", as_bytes, read=True)


def delete_file(file_id: str) -> Call[FileDeleted]:
    """`DELETE /v1/files/{id}`."""
    c.check_batch_id(file_id)
    return Call("DELETE", f"/v1/files/{segment(file_id)}", as_object(FileDeleted))


def create_batch(input_file_id: str, endpoint: str, completion_window: str,
                 metadata: Mapping[str, str] | None) -> Call[Batch]:
    """`POST /v1/batches`; endpoint, window and metadata are checked before any request."""
    c.check_batch_id(input_file_id)
    c.check_batch_create(endpoint, completion_window, metadata)
    body = c.clean({"input_file_id": input_file_id, "endpoint": endpoint, "completion_window": completion_window,
                    "metadata": dict(metadata) if metadata is not None else None})
    return Call("POST", "/v1/batches", as_object(Batch), json=body)


def get_batch(batch_id: str) -> Call[Batch]:
    """`GET /v1/batches/{id}`."""
    c.check_batch_id(batch_id)
    return Call("GET", f"/v1/batches/{segment(batch_id)}", as_object(Batch), read=True)


def list_batches_page(limit: int, after: str | None) -> Call[BatchPage]:
    """`GET /v1/batches`: one page, newest first; the limit (1..100) is checked before any request."""
    c.check_batch_list_limit(limit)
    return Call("GET", "/v1/batches", as_object(BatchPage), read=True, params=c.clean({"limit": limit, "after": after}))


def cancel_batch(batch_id: str) -> Call[Batch]:
    """`POST /v1/batches/{id}/cancel`."""
    c.check_batch_id(batch_id)
    return Call("POST", f"/v1/batches/{segment(batch_id)}/cancel", as_object(Batch))

"""`Client`: the synchronous client for every route of the inferd API."""

from __future__ import annotations

import time
from datetime import date, datetime
from typing import Any, Callable, Iterator, Mapping, Sequence

import httpx

from inferd_client._admin_client import AdminMethods
from inferd_client import _routes as routes
from inferd_client._calls import BATCH_ENDPOINT, BATCH_WINDOW, NOT_GIVEN, Call, FileSource, NotGiven
from inferd_client._client_base import BatchWait, ClientBase, GenerateFrame, R, raw_call
from inferd_client._config import open_upload
from inferd_client._conversation_types import (Conversation, ConversationList, ConversationMessage, DeleteResult,
                                               Participant, Source, SourceList, VectorizeResult, parse_generate_frame)
from inferd_client._me_types import Me
from inferd_client._retry import RetryPolicy
from inferd_client._streaming import Stream
from inferd_client._types import (Batch, BatchPage, ChatCompletion, ChatCompletionChunk, EmbeddingList,
                                  ExchangeResult, FileDeleted, FileObject, ImagesResponse, ModelList, RerankResponse,
                                  TokenCount, Transcription, UsagePage, UsageSummary, VoiceList)


class Client(ClientBase[httpx.Client], AdminMethods):
    """Synchronous client. `base_url` is the server root (a trailing `/v1` is accepted too).

    Reads (GET, and the free `count_tokens`) are retried on 429, 5xx and connection failures
    per `RetryPolicy` (default 4 attempts, 1 s doubling to 30 s with jitter, `Retry-After`
    honoured); writes are sent once. Use it as a context manager, or call `close()`.
    The /v1/admin methods (an admin key) are `AdminMethods`'.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0,
                 max_attempts: int | None = None, retry: RetryPolicy | None = None,
                 headers: Mapping[str, str] | None = None, http_client: httpx.Client | None = None) -> None:
        super().__init__(base_url, api_key, timeout, max_attempts, retry, headers, http_client, httpx.Client)

    # --- plumbing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool (only when this client created it)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _send(self, call: Call[Any], *, stream: bool = False) -> httpx.Response:
        """Send `call`, retrying reads per the policy; returns a successful response or raises."""
        attempt = 0
        while True:
            attempt += 1
            with open_upload(call.upload) as upload:
                try:
                    response = self._http.send(self._request(call, upload), stream=stream)
                except httpx.TransportError as exc:
                    self.retry.sleep(self._delay_after_transport_error(call, exc, attempt))
                    continue
            if response.status_code < 400:
                return response
            if stream:
                response.read()
                response.close()
            self.retry.sleep(self._delay_after_status(call, response, attempt))

    def _call(self, call: Call[R]) -> R:
        return call.parse(self._send(call))

    def _stream(self, call: Call[Any], decode: Callable[[Any], R]) -> Stream[R]:
        return Stream(self._send(call, stream=True), decode)

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json: Any = None,
                data: Mapping[str, str] | None = None, read: bool | None = None) -> httpx.Response:
        """Any route, raw: `path` is relative to the base URL; errors are raised like every call.
        Retried only when `read` (default: the method is GET)."""
        return self._send(raw_call(method, path, params, json, data, read))

    # --- inference ----------------------------------------------------------------------------

    def chat(self, model: str, messages: Sequence[Mapping[str, Any]], **params: Any) -> ChatCompletion:
        """A blocking chat completion; extra keyword arguments are passed through to the model."""
        return self._call(routes.chat(model, messages, False, params))

    def chat_stream(self, model: str, messages: Sequence[Mapping[str, Any]],
                    **params: Any) -> Stream[ChatCompletionChunk]:
        """A streamed chat completion: iterate the chunks; the last one before `[DONE]` has `usage`."""
        return self._stream(routes.chat(model, messages, True, params), ChatCompletionChunk.from_dict)

    def count_tokens(self, model: str, messages: Sequence[Mapping[str, Any]], **params: Any) -> TokenCount:
        """Input tokens the same chat call would be billed for, and the model's context window."""
        return self._call(routes.count_tokens(model, messages, params))

    def embeddings(self, model: str, input: str | Sequence[str], **params: Any) -> EmbeddingList:
        """Dense embeddings (`encoding_format="base64"` gives base64 float32 strings)."""
        return self._call(routes.embeddings(model, input, params))

    def rerank(self, model: str, query: str, documents: Sequence[str], *, top_n: int | None = None,
               **params: Any) -> RerankResponse:
        """Documents scored against the query, highest first."""
        return self._call(routes.rerank(model, query, documents, top_n, params))

    def models(self) -> ModelList:
        """The models the caller's org may use."""
        return self._call(routes.models())

    def speech(self, model: str, input: str, voice: str, **params: Any) -> bytes:
        """Text to speech: the audio bytes in `response_format` (mp3 by default)."""
        return self._call(routes.speech(model, input, voice, params))

    def transcribe(self, file: FileSource, *, model: str = "stt", **fields: Any) -> Transcription | str:
        """Speech to text. `model` picks the deployment; fields (`language`, `prompt`,
        `response_format`, and `engine_model` sent as the form's `model`) go to the engine."""
        if "engine_model" in fields:
            fields["model"] = fields.pop("engine_model")
        return self._call(routes.transcription(file, model, fields))

    def voices(self, model: str = "tts") -> VoiceList:
        """The voices of a speech model."""
        return self._call(routes.voices(model))

    def generate_images(self, model: str, prompt: str, size: str, *, timeout: float | None = None,
                        **params: Any) -> ImagesResponse:
        """Text to image (base64 PNGs); waits up to `timeout` (default 600 s) for the images."""
        return self._call(routes.images(model, prompt, size, params, timeout))

    # --- usage, key exchange and the calling key ----------------------------------------------

    def usage(self, *, from_: str | date | datetime | None = None, to: str | date | datetime | None = None,
              **filters: Any) -> UsagePage:
        """The caller's usage rows, newest first (filters: model, workspace, deployment, metadata, limit, offset)."""
        return self._call(routes.usage({**filters, "from_": from_, "to": to}))

    def usage_summary(self, group_by: str, *, from_: str | date | datetime | None = None,
                      to: str | date | datetime | None = None, **filters: Any) -> UsageSummary:
        """Usage totals grouped by model, workspace, key_id, user_id, day or `metadata.<tag>`."""
        return self._call(routes.usage_summary(group_by, {**filters, "from_": from_, "to": to}))

    def exchange(self, *, idp_token: str | None = None, api_key: str | None = None,
                 ttl_seconds: int | None = None) -> ExchangeResult:
        """Mint a user-scoped key: from an identity-provider token (shape A) or a user-owned key (shape B)."""
        return self._call(routes.exchange(idp_token, api_key, ttl_seconds))

    def me(self) -> Me:
        """The calling application or admin key: its org, team, models, expiry, and what is left of
        every window and budget it falls under (reading it takes a slot of its rpm windows)."""
        return self._call(routes.me())

    # --- conversations and sources (user-scoped key) ------------------------------------------

    def list_conversations(self, *, project_id: str | int | None = None, cloud_agents: bool = False,
                           archived: bool = False) -> ConversationList:
        """Conversations owned by or shared with the user, newest first."""
        return self._call(routes.list_conversations(project_id, cloud_agents, archived))

    def get_conversation(self, conversation_id: int | str, *, before_id: int | None = None,
                         from_id: int | None = None, limit: int | None = None) -> Conversation:
        """The visible thread of the active branch, paged by `before_id` / `from_id` / `limit`."""
        return self._call(routes.get_conversation(conversation_id, before_id, from_id, limit))

    def conversation_sources(self, conversation_id: int | str) -> SourceList:
        """The active sources attached to a conversation."""
        return self._call(routes.conversation_sources(conversation_id))

    def generate(self, conversation_id: int, message_id: int, *, model: str, thinking: bool | None = None,
                 web_search: bool | None = None) -> Stream[GenerateFrame]:
        """Stream the reply to a saved user message: a `GenerateStart`, then `GenerateChunk`s and
        `GenerateEvent`s, until `[DONE]`."""
        return self._stream(routes.generate(conversation_id, message_id, model, thinking, web_search),
                            parse_generate_frame)

    def delete_conversations(self, conversation_ids: Sequence[int | str]) -> DeleteResult:
        """Delete what the user may delete; the rest is reported in `skipped_ids`."""
        return self._call(routes.delete_conversations(conversation_ids))

    def vectorize(self, conversation_id: int, file: FileSource, *, ephemeral: bool | None = None) -> VectorizeResult:
        """Ingest a document into a conversation (id 0 creates one)."""
        return self._call(routes.vectorize(conversation_id, file, ephemeral))

    def list_sources(self) -> SourceList:
        """Every source the user can reach, once per conversation."""
        return self._call(routes.list_sources())

    def create_conversation(self, *, title: str | None = None, project_id: int | None = None,
                            cloud_agent_task_id: int | None = None) -> Conversation:
        """A new conversation owned by the user."""
        return self._call(routes.create_conversation(title, project_id, cloud_agent_task_id))

    def add_message(self, conversation_id: int | str, message: str, *,
                    parent_message_id: int | None = None) -> ConversationMessage:
        """Save a user message (a second child of one parent starts a new branch)."""
        return self._call(routes.add_message(conversation_id, message, parent_message_id))

    def add_participant(self, conversation_id: int | str, email: str, role: str) -> Participant:
        """Share a conversation with another user."""
        return self._call(routes.add_participant(conversation_id, email, role))

    def update_conversation(self, conversation_id: int | str, *, title: str | None | NotGiven = NOT_GIVEN,
                            archived: bool | NotGiven = NOT_GIVEN,
                            project_id: int | None | NotGiven = NOT_GIVEN) -> Conversation:
        """Rename, archive or move a conversation; only the arguments given are sent."""
        return self._call(routes.update_conversation(conversation_id, title, archived, project_id))

    def update_source(self, source_id: int | str, *, is_active: bool | None = None,
                      use_in_tasks: bool | None = None) -> Source:
        """Toggle a source the user owns."""
        return self._call(routes.update_source(source_id, is_active, use_in_tasks))

    # --- files and batches --------------------------------------------------------------------

    def create_file(self, file: FileSource, *, purpose: str = "batch") -> FileObject:
        """Upload a JSONL batch input (a path, bytes, a binary file object or `(name, content)`)."""
        return self._call(routes.create_file(file, purpose))

    def get_file(self, file_id: str) -> FileObject:
        """A file's object."""
        return self._call(routes.get_file(file_id))

    def get_file_content(self, file_id: str) -> bytes:
        """A file's bytes (JSONL for batch output and error files)."""
        return self._call(routes.get_file_content(file_id))

    def delete_file(self, file_id: str) -> FileDeleted:
        """Delete a file."""
        return self._call(routes.delete_file(file_id))

    def create_batch(self, input_file_id: str, *, endpoint: str = BATCH_ENDPOINT,
                     completion_window: str = BATCH_WINDOW, metadata: Mapping[str, str] | None = None) -> Batch:
        """Start a batch over an uploaded file."""
        return self._call(routes.create_batch(input_file_id, endpoint, completion_window, metadata))

    def get_batch(self, batch_id: str) -> Batch:
        """A batch's current state."""
        return self._call(routes.get_batch(batch_id))

    def list_batches_page(self, *, limit: int = 20, after: str | None = None) -> BatchPage:
        """One page of batches, newest first."""
        return self._call(routes.list_batches_page(limit, after))

    def list_batches(self, *, limit: int = 20, after: str | None = None) -> Iterator[Batch]:
        """Every batch, newest first, fetching pages with `after` until a page is empty."""
        routes.list_batches_page(limit, after)  # check the limit now, not at the first next()
        return self._iter_batches(limit, after)

    def _iter_batches(self, limit: int, after: str | None) -> Iterator[Batch]:
        while True:
            page = self.list_batches_page(limit=limit, after=after)
            if not page.data:
                return
            yield from page.data
            after = page.data[-1].id

    def cancel_batch(self, batch_id: str) -> Batch:
        """Cancel a batch: `cancelling` while lines drain, else `cancelled`."""
        return self._call(routes.cancel_batch(batch_id))

    def wait_batch(self, batch_id: str, *, poll_interval: float = 5.0, max_interval: float = 30.0,
                   timeout: float | None = None, on_progress: Callable[[Batch], None] | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> Batch:
        """Poll until the batch leaves the live statuses; returns it terminal.

        Waits `poll_interval` (5 s) after the first look, doubling up to `max_interval` (30 s).
        `on_progress` sees every polled state. Past `timeout` seconds raises `WaitTimeout`.
        """
        wait = BatchWait(batch_id, poll_interval, max_interval, timeout, on_progress)
        while True:
            batch = self.get_batch(batch_id)
            delay = wait.delay_after(batch)
            if delay is None:
                return batch
            sleep(delay)

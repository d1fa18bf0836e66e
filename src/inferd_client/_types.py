"""Typed results of the inference, usage, key exchange, file and batch routes (spec field names)."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any, ClassVar, Generic, Mapping, TypeVar

from inferd_client._base import APIObject, ListObject

LIVE_BATCH_STATUSES = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
TERMINAL_BATCH_STATUSES = frozenset({"completed", "failed", "expired", "cancelled"})

Choice = TypeVar("Choice", bound=APIObject)


# --- chat ----------------------------------------------------------------------------------

class Usage(APIObject):
    """Token counts of one call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class _MessageFields(APIObject):
    """What an assistant message and a streamed increment of one both carry."""

    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatMessage(_MessageFields):
    """An assistant message of a completion (`reasoning_content` from some engines stays in `raw`)."""

    role: str = "assistant"


class ChatChoice(APIObject):
    """One choice of a completion."""

    index: int = 0
    message: ChatMessage = dataclasses.field(default_factory=ChatMessage)
    finish_reason: str | None = None


class _CompletionFields(APIObject, Generic[Choice]):
    """What a blocking completion and each chunk of a streamed one both carry."""

    id: str = ""
    object: str = ""
    created: int = 0
    model: str = ""
    choices: list[Choice] = dataclasses.field(default_factory=list)
    usage: Usage | None = None

    # the field of a choice that holds the text: the whole `message`, or a chunk's `delta`
    _text_part: ClassVar[str] = "message"

    @property
    def text(self) -> str:
        """The first choice's content ('' when none); a chunk's is its increment."""
        return (getattr(self.choices[0], self._text_part).content or "") if self.choices else ""


class ChatCompletion(_CompletionFields[ChatChoice]):
    """A blocking chat completion."""


class ChunkDelta(_MessageFields):
    """The increment a streamed chunk carries."""


class ChunkChoice(APIObject):
    """One choice of a streamed chunk."""

    index: int = 0
    delta: ChunkDelta = dataclasses.field(default_factory=ChunkDelta)
    finish_reason: str | None = None


class ChatCompletionChunk(_CompletionFields[ChunkChoice]):
    """One SSE chunk of a streamed completion; the last one before `[DONE]` carries `usage`."""

    _text_part: ClassVar[str] = "delta"


class TokenCount(APIObject):
    """`POST /v1/chat/count_tokens`."""

    input_tokens: int = 0
    context_window: int = 0


# --- embeddings, rerank, models --------------------------------------------------------------

class Embedding(APIObject):
    """One vector: a float list, or a base64 float32 string under `encoding_format="base64"`."""

    object: str = "embedding"
    index: int = 0
    embedding: list[float] | str = dataclasses.field(default_factory=list)


class EmbeddingList(ListObject[Embedding]):
    """`POST /v1/embeddings`."""

    model: str = ""
    usage: Usage | None = None


class RerankResult(APIObject):
    """One scored document; `index` is its position in the request."""

    index: int = 0
    relevance_score: float = 0.0
    document: dict[str, Any] | None = None


class RerankResponse(APIObject):
    """`POST /v1/rerank`: results by relevance, highest first."""

    id: str = ""
    model: str = ""
    results: list[RerankResult] = dataclasses.field(default_factory=list)
    usage: Usage | None = None


class Model(APIObject):
    """A catalogue entry; optional fields are None when the server omitted them."""

    id: str = ""
    object: str = "model"
    created: int = 0
    owned_by: str = ""
    context_length: int | None = None
    model_type: str | None = None
    model_full_name: str | None = None
    model_icon_url: str | None = None
    capabilities: dict[str, bool] = dataclasses.field(default_factory=dict)
    supported_parameters: list[str] = dataclasses.field(default_factory=list)
    aliases: list[str] = dataclasses.field(default_factory=list)
    cost: dict[str, float] | None = None
    description: str | None = None
    use_when: str | None = None


class ModelList(ListObject[Model]):
    """`GET /v1/models`."""


# --- audio and images ------------------------------------------------------------------------

class Transcription(APIObject):
    """`json` or `verbose_json` transcription (`text`, `srt`, `vtt` come back as plain strings)."""

    text: str = ""
    language: str | None = None
    duration: float | None = None
    segments: list[dict[str, Any]] | None = None


class VoiceList(APIObject):
    """`GET /v1/voices`, either documented shape; `ids` lists the voice ids of both."""

    ids: list[str] = dataclasses.field(default_factory=list)
    data: list[Any] = dataclasses.field(default_factory=list)

    @classmethod
    def parse(cls, body: Any) -> "VoiceList":
        """From an array of ids or an object with `data[]` of `{id}` objects."""
        if isinstance(body, list):
            return cls(raw={"data": body}, ids=[str(v) for v in body], data=list(body))
        items = list(body.get("data") or []) if isinstance(body, dict) else []
        ids = [str(v.get("id")) if isinstance(v, dict) else str(v) for v in items]
        return cls(raw=dict(body) if isinstance(body, dict) else {}, ids=ids, data=items)


class ImageData(APIObject):
    """One generated image."""

    b64_json: str = ""

    def png(self) -> bytes:
        """The decoded PNG bytes."""
        return base64.b64decode(self.b64_json)


class ImagesResponse(APIObject):
    """`POST /v1/images/generations`."""

    created: int = 0
    data: list[ImageData] = dataclasses.field(default_factory=list)


# --- usage and key exchange ------------------------------------------------------------------

class Pagination(APIObject):
    """Paging of the usage routes (`from` is `from_` in Python)."""

    _renamed: ClassVar[Mapping[str, str]] = {"from_": "from"}
    limit: int = 0
    offset: int = 0
    has_more: bool = False
    from_: str | None = None
    to: str | None = None


class UsageRow(APIObject):
    """One metered call."""

    id: int = 0
    org: str = ""
    deployment: str = ""
    key_id: str = ""
    user_id: str | None = None
    model: str = ""
    workspace: str = ""
    # the call: how long it took, how it ended, when; then what it was metered
    latency_ms: int = 0
    status_code: int = 0
    created_at: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    cost_usd: float = 0.0
    team_id: int | None = None
    team: str | None = None  # the team's name
    cache_hit: bool = False  # answered from the response cache: cost_usd 0, the tokens as first billed
    saved_usd: float = 0.0  # on a cache hit, what the answer first cost
    guardrail: str | None = None  # the output guardrail that withheld the reply
    metadata: dict[str, str] | None = None


class UsagePage(APIObject):
    """`GET /v1/usage`."""

    success: bool = True
    data: list[UsageRow] = dataclasses.field(default_factory=list)
    pagination: Pagination = dataclasses.field(default_factory=Pagination)


class UsageSummaryRow(APIObject):
    """One group of `GET /v1/usage/summary`; `group_value` None is the untagged bucket."""

    group_value: str | None = None
    requests: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0  # requests answered from the response cache
    saved_usd: float = 0.0  # what those answers first cost


class UsageSummary(APIObject):
    """`GET /v1/usage/summary`."""

    success: bool = True
    group_by: str = ""
    data: list[UsageSummaryRow] = dataclasses.field(default_factory=list)
    pagination: Pagination = dataclasses.field(default_factory=Pagination)


class ExchangeResult(APIObject):
    """`POST /v1/auth/exchange`, either shape, flattened: `bearer` is the token to send.

    Shape A fills `access_key_id`, `secret`, `full_key`, `user_id`, `org_id`; shape B fills
    `user_key`; both fill `expires_at`.
    """

    access_key_id: str | None = None
    secret: str | None = None
    full_key: str | None = None
    user_key: str | None = None
    expires_at: str | None = None
    user_id: str | None = None
    org_id: int | None = None

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> "ExchangeResult":
        """From `{success, data: {...}}` (A) or `{success, user_key, expires_at}` (B)."""
        inner = body.get("data") if isinstance(body.get("data"), Mapping) else body
        result = cls.from_dict(inner)
        result.raw = dict(body)
        return result

    @property
    def bearer(self) -> str:
        """The minted user-scoped bearer token."""
        token = self.full_key or self.user_key
        if not token:
            raise ValueError("the exchange response carried no key")
        return token


# --- files and batches -----------------------------------------------------------------------

class FileObject(APIObject):
    """An uploaded or produced file."""

    id: str = ""
    object: str = "file"
    filename: str = ""
    bytes: int = 0
    purpose: str = ""
    status: str | None = None
    created_at: int = 0


class FileDeleted(APIObject):
    """`DELETE /v1/files/{id}`."""

    id: str = ""
    object: str = "file"
    deleted: bool = False


class RequestCounts(APIObject):
    """Requests of a batch; cancelled and expired ones count in `total` only."""

    total: int = 0
    completed: int = 0
    failed: int = 0


class Batch(APIObject):
    """A batch of chat-completion requests."""

    id: str = ""
    object: str = "batch"
    endpoint: str = "/v1/chat/completions"
    input_file_id: str = ""
    completion_window: str = "24h"
    status: str = ""
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int = 0
    expires_at: int | None = None
    request_counts: RequestCounts = dataclasses.field(default_factory=RequestCounts)
    errors: Any = None
    metadata: dict[str, str] | None = None

    @property
    def is_live(self) -> bool:
        """Still moving: validating, in_progress, finalizing or cancelling."""
        return self.status in LIVE_BATCH_STATUSES


class BatchPage(ListObject[Batch]):
    """One page of `GET /v1/batches` (`{object, data, first_id, last_id, has_more}`)."""

    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False

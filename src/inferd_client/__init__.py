"""inferd_client: the Python client of the inferd API (depends on httpx only).

    from inferd_client import Client

    with Client("http://127.0.0.1:8080", api_key="IFDK...:...") as client:
        print(client.chat("fast", [{"role": "user", "content": "Hello!"}]).text)
        for chunk in client.chat_stream("fast", [{"role": "user", "content": "Count to five"}]):
            print(chunk.text, end="")

Reads are retried on 429, 5xx and connection failures (see `RetryPolicy`); writes are sent once.
"""

from inferd_client._admin_types import (AdminKey, AdminKeyList, AuditEntry, AuditPage, CreatedKey, DeploymentHealth,
                                        DeploymentList, OrgSettings, Team, TeamDeleted, TeamList)
from inferd_client._async_client import AsyncClient
from inferd_client._base import APIObject
from inferd_client._calls import NOT_GIVEN, NotGiven
from inferd_client._client import Client
from inferd_client._conversation_types import (Conversation, ConversationList, ConversationListItem,
                                               ConversationMessage, DeleteResult, GenerateChunk, GenerateEvent,
                                               GenerateStart, Participant, Source, SourceList, VectorizeResult)
from inferd_client._errors import (APIConnectionError, APIError, APITimeoutError, AuthenticationError,
                                   BadRequestError, BudgetExceededError, ClientValidationError, InferdClientError,
                                   InternalServerError, MethodNotAllowedError, NotFoundError, PayloadTooLargeError,
                                   PermissionDeniedError, RateLimitError, StreamError, UnprocessableEntityError,
                                   WaitTimeout)
from inferd_client._me_types import BudgetState, Me, WindowState
from inferd_client._retry import RetryPolicy
from inferd_client._sse import ServerSentEvent, SSEDecoder
from inferd_client._streaming import AsyncStream, Stream
from inferd_client._types import (LIVE_BATCH_STATUSES, TERMINAL_BATCH_STATUSES, Batch, BatchPage, ChatChoice,
                                  ChatCompletion, ChatCompletionChunk, ChatMessage, ChunkChoice, ChunkDelta, Embedding,
                                  EmbeddingList, ExchangeResult, FileDeleted, FileObject, ImageData, ImagesResponse,
                                  Model, ModelList, Pagination, RequestCounts, RerankResponse, RerankResult,
                                  TokenCount, Transcription, Usage, UsagePage, UsageRow, UsageSummary,
                                  UsageSummaryRow, VoiceList)

__version__ = "0.1.0"

__all__ = [
    "AdminKey", "AdminKeyList", "AuditEntry", "AuditPage", "CreatedKey", "DeploymentHealth", "DeploymentList",
    "OrgSettings", "Team", "TeamDeleted", "TeamList",
    "BudgetState", "Me", "WindowState",
    "APIConnectionError", "APIError", "APIObject", "APITimeoutError", "AsyncClient", "AsyncStream",
    "AuthenticationError", "BadRequestError", "Batch", "BatchPage", "BudgetExceededError", "ChatChoice",
    "ChatCompletion", "ChatCompletionChunk", "ChatMessage", "ChunkChoice", "ChunkDelta", "Client",
    "ClientValidationError", "Conversation", "ConversationList", "ConversationListItem", "ConversationMessage",
    "DeleteResult", "Embedding", "EmbeddingList", "ExchangeResult", "FileDeleted", "FileObject", "GenerateChunk",
    "GenerateEvent", "GenerateStart", "ImageData", "ImagesResponse", "InferdClientError", "InternalServerError",
    "LIVE_BATCH_STATUSES", "MethodNotAllowedError", "Model", "ModelList", "NOT_GIVEN", "NotFoundError", "NotGiven",
    "Pagination", "Participant", "PayloadTooLargeError", "PermissionDeniedError", "RateLimitError",
    "RequestCounts", "RerankResponse", "RerankResult", "RetryPolicy", "SSEDecoder", "ServerSentEvent", "Source",
    "SourceList", "Stream", "StreamError", "TERMINAL_BATCH_STATUSES", "TokenCount", "Transcription",
    "UnprocessableEntityError", "Usage", "UsagePage", "UsageRow", "UsageSummary", "UsageSummaryRow",
    "VectorizeResult", "VoiceList", "WaitTimeout", "__version__",
]

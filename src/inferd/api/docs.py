"""OpenAPI entries for the raw-ASGI hot routes. The dispatcher in app.py answers these paths
before FastAPI sees them; these stubs exist so /openapi.json documents their schemas."""

from __future__ import annotations

from fastapi import APIRouter

from inferd.errors import ServiceUnavailable
from inferd.protocol.chat import (ChatCompletionRequest, ChatCompletionResponse, CountTokensRequest,
                                  CountTokensResponse)
from inferd.protocol.embeddings import EmbeddingRequest, EmbeddingResponse
from inferd.protocol.messages import (CountMessageTokensRequest, CountMessageTokensResponse, ErrorResponse,
                                      MessageResponse, MessagesRequest)
from inferd.protocol.rerank import RerankRequest, RerankResponse
from inferd.protocol.responses import ResponseObject, ResponsesRequest

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, tags=["chat"])
async def chat_completions(request: ChatCompletionRequest) -> ChatCompletionResponse:
    """Blocking, or `text/event-stream` of chunks ending with `data: [DONE]` when `stream` is true."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/chat/count_tokens", response_model=CountTokensResponse, tags=["chat"])
async def count_tokens(request: CountTokensRequest) -> CountTokensResponse:
    """Prompt tokens a completion of this request would bill; free, no usage row."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/embeddings", response_model=EmbeddingResponse, tags=["embeddings"])
async def embeddings(request: EmbeddingRequest) -> EmbeddingResponse:
    """Dense embeddings; priced on input tokens only."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/rerank", response_model=RerankResponse, tags=["rerank"])
async def rerank(request: RerankRequest) -> RerankResponse:
    """Documents scored against the query, best first."""
    raise ServiceUnavailable("not served here")


# Anthropic's dialect answers errors in its own envelope (CONTRACT.md decision 20).
_ANTHROPIC_ERRORS: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 402, 403, 404, 413, 429, 500, 503)}


@router.post("/v1/messages", response_model=MessageResponse, tags=["messages"], responses=_ANTHROPIC_ERRORS)
async def messages(request: MessagesRequest) -> MessageResponse:
    """Anthropic's Messages API on any chat model: blocking, or `text/event-stream` of Anthropic's events
    when `stream` is true. Metered and billed as chat."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/messages/count_tokens", response_model=CountMessageTokensResponse, tags=["messages"],
             responses=_ANTHROPIC_ERRORS)
async def count_message_tokens(request: CountMessageTokensRequest) -> CountMessageTokensResponse:
    """Prompt tokens a message of this request would bill; free, no usage row."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/responses", response_model=ResponseObject, tags=["responses"])
async def responses(request: ResponsesRequest) -> ResponseObject:
    """OpenAI's Responses API on any chat model: blocking, or `text/event-stream` of typed events
    (each with a `sequence_number`) when `stream` is true. Metered and billed as chat; stored for
    the key 30 days unless `store` is false."""
    raise ServiceUnavailable("not served here")

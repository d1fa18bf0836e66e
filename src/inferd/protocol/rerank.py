"""Wire schemas of rerank (for /openapi.json)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from inferd.protocol.checks import ModelName


class RerankRequest(BaseModel):
    model: ModelName
    query: str
    documents: list[str]
    top_n: int | None = Field(None, ge=1, description="Default: all documents.")


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int = Field(description="Position in the request's documents.")
    relevance_score: float = Field(ge=0, le=1)
    document: RerankDocument


class RerankUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult] = Field(description="Sorted by relevance_score, best first.")
    usage: RerankUsage

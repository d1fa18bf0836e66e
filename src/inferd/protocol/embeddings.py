"""Wire schemas of embeddings (for /openapi.json; the hot route validates only `model`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.protocol.checks import ModelName


class EmbeddingRequest(BaseModel):
    """Extra fields are accepted and forwarded to the engine."""

    model_config = ConfigDict(extra="allow")
    model: ModelName
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)


class Embedding(BaseModel):
    object: str
    index: int
    embedding: list[float] | str = Field(description="Floats, or base64 of little-endian float32.")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: str
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage

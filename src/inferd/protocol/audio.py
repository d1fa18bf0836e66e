"""Wire schemas of speech (for /openapi.json)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SpeechRequest(BaseModel):
    """Only `model` is required by the service; the engine requires `voice` and `input`."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(max_length=256)
    voice: str | None = None
    input: str | None = None
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)

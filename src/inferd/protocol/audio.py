"""Wire schemas of speech (for /openapi.json)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.protocol.checks import ModelName

MAX_SPEECH_INPUT = 4096  # characters of `input`: a few minutes of speech
MIN_SPEED, MAX_SPEED = 0.25, 4.0


class SpeechRequest(BaseModel):
    """Only `model` is required by the service; the engine requires `voice` and `input`."""

    model_config = ConfigDict(extra="allow")
    model: ModelName
    voice: str | None = None
    input: str | None = Field(None, max_length=MAX_SPEECH_INPUT)
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float = Field(1.0, ge=MIN_SPEED, le=MAX_SPEED)

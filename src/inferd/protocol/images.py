"""Wire schema of image generation (for /openapi.json)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ImageGenerationRequest(BaseModel):
    model: str = Field(max_length=256, description="Alias `t2i` resolves to the image model.")
    prompt: str
    size: str = Field(pattern=r"^[1-9][0-9]*x[1-9][0-9]*$", description="<width>x<height>")
    n: int = Field(1, ge=1, le=10)
    negative_prompt: str | None = None
    num_inference_steps: int | None = Field(None, description="Model default 50.")
    guidance_scale: float | None = Field(None, description="Model default 4.0.")
    seed: int | None = None
    response_format: Literal["b64_json"] = "b64_json"

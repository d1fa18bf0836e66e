"""Wire schema of image generation (for /openapi.json)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from inferd.protocol.checks import ModelName

MAX_IMAGES = 10
MAX_SIDE = 2048  # pixels, either side
MAX_STEPS_IN_PROCESS = 150  # on a model generated in this process; an upstream judges its own
# <width>x<height>, each side 1 to 2048 (written out so that a schema-driven client knows the bound).
_SIDE = r"([1-9][0-9]{0,2}|1[0-9]{3}|20[0-3][0-9]|204[0-8])"
SIZE_PATTERN = rf"^{_SIDE}x{_SIDE}$"


class ImageGenerationRequest(BaseModel):
    model: ModelName = Field(description="Alias `t2i` resolves to the image model.")
    prompt: str = Field(min_length=1)
    size: str = Field(pattern=SIZE_PATTERN, description=f"<width>x<height>, each side at most {MAX_SIDE}")
    n: int = Field(1, ge=1, le=MAX_IMAGES)
    negative_prompt: str | None = None
    num_inference_steps: int | None = Field(None, description="Model default 50; at most "
                                            f"{MAX_STEPS_IN_PROCESS} on a model generated in-process.")
    guidance_scale: float | None = Field(None, description="Model default 4.0.")
    seed: int | None = None
    response_format: Literal["b64_json"] = "b64_json"

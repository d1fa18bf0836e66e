"""Wire schema of the model catalogue (GET /v1/models)."""

from __future__ import annotations

from pydantic import BaseModel


class ModelCost(BaseModel):
    input_per_m_token: float
    output_per_m_token: float
    image_per_generation: float | None = None


class ModelObject(BaseModel):
    """Optional fields are omitted when unset; capabilities hold only true flags."""

    id: str
    object: str
    created: int
    owned_by: str
    context_length: int | None = None
    model_type: str
    model_full_name: str
    model_icon_url: str | None = None
    capabilities: dict[str, bool]
    supported_parameters: list[str]
    aliases: list[str]
    cost: ModelCost | None = None
    description: str | None = None
    use_when: str | None = None


class ModelList(BaseModel):
    object: str
    data: list[ModelObject]

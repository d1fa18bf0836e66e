"""Wire schemas of OpenAI's Responses API, for /openapi.json.

The hot route validates and translates with `dialects/responses_mapping.py`; these models only
document the shapes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.protocol.checks import METADATA_LIMITS, Metadata, ModelName


class InputText(BaseModel):
    type: Literal["input_text"]
    text: str


class InputImage(BaseModel):
    type: Literal["input_image"]
    image_url: str = Field(description="A URL or a data URL (file_id is not served).")
    detail: Literal["low", "high", "auto"] | None = None


class MessageItem(BaseModel):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[InputText | InputImage]


class FunctionCallItem(BaseModel):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str = Field(description="The arguments as a JSON text.")
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(BaseModel):
    type: Literal["function_call_output"]
    call_id: str
    output: str


class FunctionTool(BaseModel):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamedFunction(BaseModel):
    type: Literal["function"]
    name: str


class Reasoning(BaseModel):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        None, description="As chat's reasoning_effort (minimal: low, none: off, xhigh: high).")


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, description="Required for json_schema.")
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="Required for json_schema.")
    strict: bool | None = None


class TextConfig(BaseModel):
    format: TextFormat | None = None


class ResponsesRequest(BaseModel):
    """POST /v1/responses. Metered and billed as chat (workspace `chat`, `metadata` on the usage row)."""

    model_config = ConfigDict(extra="allow")
    model: ModelName
    input: str | list[MessageItem | FunctionCallItem | FunctionCallOutputItem]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1, description="A reply cut here ends `incomplete`.")
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    metadata: Metadata | None = Field(None, description=f"Stored on the usage row. {METADATA_LIMITS}")
    store: bool = Field(True, description="Keep the response 30 days for this key (GET, previous_response_id).")
    previous_response_id: str | None = Field(None, description="Continue from a stored response of this key.")
    reasoning: Reasoning | None = None
    text: TextConfig | None = None
    user: str | None = Field(None, description="Routes `affinity` pools, as chat's `user`.")


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: dict[str, int] = Field(description="{cached_tokens}")
    output_tokens: int
    output_tokens_details: dict[str, int] = Field(description="{reasoning_tokens}")
    total_tokens: int


class ResponseObject(BaseModel):
    """A response; output items are `message` (output_text parts), `function_call` or `reasoning`."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, str] | None = None
    model: str
    output: list[dict[str, Any]]
    usage: ResponseUsage | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"]
    deleted: bool

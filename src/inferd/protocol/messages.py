"""Wire schemas of Anthropic's Messages API, for /openapi.json.

The hot routes validate and translate with `dialects/messages_mapping.py`; these models only
document the shapes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.protocol.checks import ModelName


class ImageSource(BaseModel):
    type: Literal["base64", "url"]
    media_type: str | None = Field(None, description="image/jpeg, image/png, image/gif or image/webp (base64)")
    data: str | None = Field(None, description="The image, base64-encoded (base64 sources).")
    url: str | None = None


class TextBlock(BaseModel):
    type: Literal["text"]
    text: str


class ImageBlock(BaseModel):
    type: Literal["image"]
    source: ImageSource


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(BaseModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None


class ThinkingBlock(BaseModel):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


RequestBlock = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[RequestBlock]


class ToolDefinition(BaseModel):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class ToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(None, description="Required when type is tool.")
    disable_parallel_tool_use: bool | None = None


class Thinking(BaseModel):
    type: Literal["enabled", "disabled"]
    budget_tokens: int | None = Field(None, ge=1, description="Required when enabled; sets the reasoning effort.")


class Metadata(BaseModel):
    user_id: str | None = Field(None, description="Routes `affinity` pools; never stored.")


class CountMessageTokensRequest(BaseModel):
    """The prompt part of a Messages request."""

    model: ModelName
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None


class MessagesRequest(CountMessageTokensRequest):
    """`anthropic-version` and `anthropic-beta` headers are accepted; the key comes in `x-api-key`
    or `Authorization: Bearer`."""

    model_config = ConfigDict(extra="allow")
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    metadata: Metadata | None = None


class MessageUsage(BaseModel):
    input_tokens: int = Field(description="Prompt tokens not read from the prefix cache.")
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class MessageResponse(BaseModel):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[TextBlock | ToolUseBlock | ThinkingBlock]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"] | None
    stop_sequence: str | None
    usage: MessageUsage


class CountMessageTokensResponse(BaseModel):
    input_tokens: int


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorResponse(BaseModel):
    type: Literal["error"]
    error: ErrorDetail

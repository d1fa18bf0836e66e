"""Wire schemas of chat completions and token counting (for /openapi.json; the hot routes
validate with api/checks.py and forward unknown fields untouched)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ImageURL(BaseModel):
    url: str


class ContentPart(BaseModel):
    type: Literal["text", "image_url"]
    text: str | None = None
    image_url: ImageURL | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = Field(None, description="Required on tool messages: the id of the call answered.")


class FunctionDefinition(BaseModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


ReasoningEffort = Literal["off", "low", "medium", "high", "minimal", "none"]


class ChatCompletionRequest(BaseModel):
    """Fields not listed here are forwarded to the model unchanged; `metadata` never is."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(max_length=256)
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float | None = None
    top_p: float | None = Field(1.0)
    max_tokens: int | None = Field(None, ge=1, description="Capped at context length minus prompt.")
    stream: bool = False
    stop: str | list[str] | None = Field(None, max_length=4)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    reasoning_effort: ReasoningEffort | None = None
    metadata: dict[str, str] | None = Field(None, description="Up to 16 pairs; keys 64, values 512 characters.")
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    response_format: dict[str, Any] | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ResponseMessage(BaseModel):
    role: str
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class Choice(BaseModel):
    index: int
    message: ResponseMessage
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter"] | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class CountTokensRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field(max_length=256)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    reasoning_effort: ReasoningEffort | None = None


class CountTokensResponse(BaseModel):
    input_tokens: int
    context_window: int | None

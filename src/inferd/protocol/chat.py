"""Chat completions and token counting: the wire schemas (for /openapi.json) and the checks the hot
routes run on a parsed body, in one place. The checks are hand-written over dicts, not pydantic, so
the hot path pays for no model construction; they check only what the spec validates and unknown
fields are forwarded untouched. Every failure is a 400 whose message starts with the field's path.

The schemas take their enums and limits from the constants the checks read (the roles from the
message types), so /openapi.json says what the checks do; tests/protocol/test_openapi_agrees.py
holds the served document to the checks, value by value."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from inferd.errors import InvalidRequest
from inferd.protocol.checks import METADATA_LIMITS, Metadata, ModelName, check_model, fail, is_int, is_number

REASONING_EFFORTS = {"off": "off", "low": "low", "medium": "medium", "high": "high", "minimal": "low", "none": "off"}
TOOL_CHOICES = ("none", "auto", "required")
MAX_STOP = 4

# A field that may be left out but not sent as null (the checks refuse `"name": null`): optional in
# the model, with neither a null branch nor a null default in the schema.
Absent = SkipJsonSchema[None]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def _omitted(description: str | None = None) -> Any:
    """The default of an `Absent` field."""
    return Field(None, description=description, json_schema_extra=_no_default)


class ImageURL(BaseModel):
    url: str


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[Union[TextPart, ImagePart], Field(discriminator="type")]
Content = Union[str, list[ContentPart]]


class _MessageFields(BaseModel):
    """What a message of any role may carry; fields not listed are forwarded unchanged."""

    model_config = ConfigDict(extra="allow")
    name: str | Absent = _omitted()
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class SystemOrUserMessage(_MessageFields):
    role: Literal["system", "user"]
    content: Content


class AssistantMessage(_MessageFields):
    role: Literal["assistant"]
    content: Content | None = None


class ToolMessage(_MessageFields):
    role: Literal["tool"]
    content: Content
    tool_call_id: str = Field(min_length=1, description="The id of the call answered.")


MESSAGE_TYPES = (SystemOrUserMessage, AssistantMessage, ToolMessage)
ChatMessage = Annotated[Union[MESSAGE_TYPES], Field(discriminator="role")]  # type: ignore[valid-type]
# The roles the checks accept are the message types' roles, in this order (the 400 lists them).
ROLES: tuple[str, ...] = tuple(role for kind in MESSAGE_TYPES
                               for role in get_args(kind.model_fields["role"].annotation))


class FunctionDefinition(BaseModel):
    name: str = Field(min_length=1)
    description: str | Absent = _omitted()
    parameters: dict[str, Any] | Absent = _omitted("A JSON Schema object.")


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


ReasoningEffort = Literal[tuple(REASONING_EFFORTS)]  # type: ignore[valid-type]
EFFORT_NOTE = "Checked against the model's `thinking` mode; `minimal` counts as `low`, `none` as `off`."


class ChatCompletionRequest(BaseModel):
    """Fields not listed here are forwarded to the model unchanged; `metadata` never is."""

    model_config = ConfigDict(extra="allow")
    model: ModelName
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float | None = None
    top_p: float | None = 1.0
    max_tokens: int | None = Field(None, ge=1, description="Capped at context length minus prompt.")
    stream: bool | None = False
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = Field(
        None, description=f"A string, or at most {MAX_STOP} of them.")
    tools: list[Tool] | None = None
    tool_choice: Literal[TOOL_CHOICES] | dict[str, Any] | None = None  # type: ignore[valid-type]
    reasoning_effort: ReasoningEffort | None = Field(None, description=EFFORT_NOTE)
    metadata: Metadata | None = Field(None, description=f"Stored on the usage row, never sent to the model. "
                                      f"{METADATA_LIMITS}")
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
    """Fields not listed here are ignored."""

    model_config = ConfigDict(extra="allow")
    model: ModelName
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    reasoning_effort: ReasoningEffort | None = Field(None, description=EFFORT_NOTE)


class CountTokensResponse(BaseModel):
    input_tokens: int
    context_window: int | None


def _check_content(path: str, content: Any, role: str) -> None:
    if isinstance(content, str):
        return
    if content is None:
        if role == "assistant":
            return
        raise fail(path, f"required on {role} messages")
    if not isinstance(content, list):
        raise fail(path, "must be a string or an array of content parts")
    for i, part in enumerate(content):
        where = f"{path}[{i}]"
        if not isinstance(part, dict):
            raise fail(where, "must be an object")
        kind = part.get("type")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise fail(f"{where}.text", "required string on text parts")
        elif kind == "image_url":
            image = part.get("image_url")
            if not isinstance(image, dict) or not isinstance(image.get("url"), str):
                raise fail(f"{where}.image_url", "must be an object with a string url")
        elif kind is None:
            raise fail(f"{where}.type", "required")
        else:
            raise fail(f"{where}.type", "must be text or image_url")


def check_images(messages: Any, model_id: str, takes_images: bool, data_only: bool) -> None:
    """The image parts of chat messages (every dialect's images are `image_url` parts by now) against
    the model: none without the `image_input` capability, and only `data:` URLs where the model's
    `image_urls` is "data-only" (an upstream then never fetches a URL a client chose)."""
    for i, message in enumerate(messages):
        content = message.get("content") if message.__class__ is dict else None
        if content.__class__ is not list:
            continue
        for j, part in enumerate(content):
            if part.__class__ is not dict or part.get("type") != "image_url":
                continue
            where = f"messages[{i}].content[{j}]"
            if not takes_images:
                raise InvalidRequest(f"{where}: model '{model_id}' does not accept images (it has no image_input "
                                     "capability)", code="image_input_unsupported", param=where)
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            if data_only and not (isinstance(url, str) and url[:5].lower() == "data:"):
                raise InvalidRequest(f"{where}.image_url: model '{model_id}' accepts images only as data: URLs",
                                     code="image_url_not_allowed", param=f"{where}.image_url")


def check_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """`messages`: required array (min 1) of ChatMessage."""
    messages = body.get("messages")
    if messages is None:
        raise fail("messages", "required")
    if not isinstance(messages, list):
        raise fail("messages", "must be an array")
    if not messages:
        raise fail("messages", "must hold at least 1 message")
    for i, message in enumerate(messages):
        path = f"messages[{i}]"
        if not isinstance(message, dict):
            raise fail(path, "must be an object")
        role = message.get("role")
        if role is None:
            raise fail(f"{path}.role", "required")
        if role not in ROLES:
            raise fail(f"{path}.role", f"must be one of {', '.join(ROLES)}")
        _check_content(f"{path}.content", message.get("content"), role)
        if "name" in message and not isinstance(message["name"], str):
            raise fail(f"{path}.name", "must be a string")
        if "tool_calls" in message and message["tool_calls"] is not None:
            calls = message["tool_calls"]
            if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
                raise fail(f"{path}.tool_calls", "must be an array of objects")
        if role == "tool":
            if not isinstance(message.get("tool_call_id"), str) or not message["tool_call_id"]:
                raise fail(f"{path}.tool_call_id", "required on tool messages (the id of the call answered)")
        elif "tool_call_id" in message and message["tool_call_id"] is not None \
                and not isinstance(message["tool_call_id"], str):
            raise fail(f"{path}.tool_call_id", "must be a string")
    return messages


def check_tools(body: dict[str, Any]) -> None:
    """`tools`: array of Tool (`type` function, `function.name` required)."""
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise fail("tools", "must be an array")
    for i, tool in enumerate(tools):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise fail(path, "must be an object")
        if tool.get("type") != "function":
            raise fail(f"{path}.type", "required, and must be function")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise fail(f"{path}.function", "required object")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise fail(f"{path}.function.name", "required string")
        if "description" in function and not isinstance(function["description"], str):
            raise fail(f"{path}.function.description", "must be a string")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise fail(f"{path}.function.parameters", "must be a JSON Schema object")


def check_reasoning_effort(body: dict[str, Any]) -> str | None:
    """`reasoning_effort`: off|low|medium|high, aliases minimal (low) and none (off); normalised."""
    if "reasoning_effort" not in body or body["reasoning_effort"] is None:
        return None
    value = body["reasoning_effort"]
    if not isinstance(value, str) or value not in REASONING_EFFORTS:
        raise fail("reasoning_effort", "must be one of off, low, medium, high (or minimal, none)")
    return REASONING_EFFORTS[value]


def check_chat(body: dict[str, Any]) -> None:
    """Every rule of the ChatCompletionRequest table (metadata is checked by the caller)."""
    check_model(body)
    check_messages(body)
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        if name in body and body[name] is not None and not is_number(body[name]):
            raise fail(name, "must be a number")
    if "max_tokens" in body and body["max_tokens"] is not None:
        if not is_int(body["max_tokens"]) or body["max_tokens"] < 1:
            raise fail("max_tokens", "must be an integer >= 1")
    if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
        raise fail("stream", "must be a boolean")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str):
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise fail("stop", "must be a string or an array of strings")
        if len(stop) > MAX_STOP:
            raise fail("stop", f"at most {MAX_STOP} sequences")
    check_tools(body)
    choice = body.get("tool_choice")
    if choice is not None and not isinstance(choice, dict) and choice not in TOOL_CHOICES:
        raise fail("tool_choice", "must be none, auto, required or an object")
    if "seed" in body and body["seed"] is not None and not is_int(body["seed"]):
        raise fail("seed", "must be an integer")
    if "response_format" in body and body["response_format"] is not None \
            and not isinstance(body["response_format"], dict):
        raise fail("response_format", "must be an object")
    check_reasoning_effort(body)  # the enum here, before the limits; what the model accepts, later


def check_count_tokens(body: dict[str, Any]) -> None:
    """CountTokensRequest: model, messages, tools and reasoning_effort; other fields are ignored."""
    check_model(body)
    check_messages(body)
    check_tools(body)
    check_reasoning_effort(body)

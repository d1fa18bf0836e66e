"""Anthropic's Messages API onto chat completions and back: the one
place that knows both dialects, beside the wire shapes (`protocol/messages.py`).

Pure functions over parsed JSON, no I/O: a Messages request becomes the chat-completions body
that `ChatService` runs through the chat corridor, and a completion becomes a message. Requests
are validated as they are translated (one walk): every failure is a 400 whose message starts
with the field's path. Streams are translated by `dialects/messages_stream.py`.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from inferd.errors import InferdError, InvalidRequest, RelayedError

MAX_MODEL_LENGTH = 256
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}
# A thinking budget becomes chat's reasoning effort: below the first bound low, below the second medium.
EFFORT_BOUNDS = ((4096, "low"), (16384, "medium"))
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}
# Blocks of earlier assistant turns that chat has no place for: reasoning is not replayed.
_SKIPPED_ASSISTANT_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def _fail(param: str, problem: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {problem}", param=param)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _string(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(path, "required string")
    return value


def _block_type(path: str, block: Any) -> str:
    if not isinstance(block, dict):
        raise _fail(path, "must be an object")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise _fail(f"{path}.type", "required")
    return kind


def _image_url(path: str, block: dict[str, Any]) -> str:
    """A data URL for a base64 source (or the URL of a url source), as chat's image_url takes it."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise _fail(f"{path}.source", "required object")
    if source.get("type") == "base64":
        media_type = _string(f"{path}.source.media_type", source.get("media_type"))
        return f"data:{media_type};base64,{_string(f'{path}.source.data', source.get('data'))}"
    if source.get("type") == "url":
        return _string(f"{path}.source.url", source.get("url"))
    raise _fail(f"{path}.source.type", "must be base64 or url")


def _tool_result_text(path: str, block: dict[str, Any]) -> str:
    content = block.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _fail(f"{path}.content", "must be a string or an array of text blocks")
    texts = []
    for k, part in enumerate(content):
        where = f"{path}.content[{k}]"
        if _block_type(where, part) != "text":
            raise _fail(f"{where}.type", "only text blocks are accepted in a tool_result")
        texts.append(_string(f"{where}.text", part.get("text")))
    return "\n".join(texts)


def _user_turn(path: str, blocks: list[Any], out: list[dict[str, Any]]) -> None:
    """A user turn's blocks: tool results become `tool` messages, the rest one user message
    (after the results, where Anthropic requires them to be)."""
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        where = f"{path}.content[{j}]"
        kind = _block_type(where, block)
        if kind == "text":
            parts.append({"type": "text", "text": _string(f"{where}.text", block.get("text"))})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(where, block)}})
        elif kind == "tool_result":
            out.append({"role": "tool", "tool_call_id": _string(f"{where}.tool_use_id", block.get("tool_use_id")),
                        "content": _tool_result_text(where, block)})
        else:
            raise _fail(f"{where}.type", "must be text, image or tool_result in a user message")
    if len(parts) == 1 and parts[0]["type"] == "text":
        out.append({"role": "user", "content": parts[0]["text"]})  # the plainest shape every template takes
    elif parts:
        out.append({"role": "user", "content": parts})


def _assistant_turn(path: str, blocks: list[Any], out: list[dict[str, Any]]) -> None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        where = f"{path}.content[{j}]"
        kind = _block_type(where, block)
        if kind == "text":
            texts.append(_string(f"{where}.text", block.get("text")))
        elif kind == "tool_use":
            arguments = block.get("input")
            if not isinstance(arguments, dict):
                raise _fail(f"{where}.input", "required object")
            calls.append({"id": _string(f"{where}.id", block.get("id")), "type": "function",
                          "function": {"name": _string(f"{where}.name", block.get("name")),
                                       "arguments": orjson.dumps(arguments).decode()}})
        elif kind not in _SKIPPED_ASSISTANT_BLOCKS:
            raise _fail(f"{where}.type", "must be text, tool_use or thinking in an assistant message")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    out.append(message)


def _system(system: Any) -> str:
    if isinstance(system, str):
        return system
    if not isinstance(system, list):
        raise _fail("system", "must be a string or an array of text blocks")
    texts = []
    for i, block in enumerate(system):
        if _block_type(f"system[{i}]", block) != "text":
            raise _fail(f"system[{i}].type", "must be text")
        texts.append(_string(f"system[{i}].text", block.get("text")))
    return "\n".join(texts)


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _fail("messages", "required array of at least 1 message")
    out: list[dict[str, Any]] = []
    if body.get("system") is not None:
        out.append({"role": "system", "content": _system(body["system"])})
    for i, message in enumerate(messages):
        path = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _fail(path, "must be an object")
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise _fail(f"{path}.role", "must be user or assistant")
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif not isinstance(content, list):
            raise _fail(f"{path}.content", "required: a string or an array of content blocks")
        elif role == "user":
            _user_turn(path, content, out)
        else:
            _assistant_turn(path, content, out)
    return out


def _tools(body: dict[str, Any], chat: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _fail("tools", "must be an array")
    functions = []
    for i, tool in enumerate(tools):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _fail(path, "must be an object")
        if tool.get("type") not in (None, "custom"):
            raise _fail(f"{path}.type", f"server tool {tool.get('type')!r} is not served here; only custom tools")
        name = _string(f"{path}.name", tool.get("name"))
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise _fail(f"{path}.input_schema", "required JSON Schema object")
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if tool.get("description") is not None:
            function["description"] = _string(f"{path}.description", tool["description"])
        functions.append({"type": "function", "function": function})
    if not functions:
        return
    chat["tools"] = functions
    choice = body.get("tool_choice")
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": _string("tool_choice.name",
                                                                                 choice.get("name"))}}
    elif kind in TOOL_CHOICES:
        chat["tool_choice"] = TOOL_CHOICES[kind]
    else:
        raise _fail("tool_choice", "must be an object whose type is auto, any, tool or none")
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def _reasoning_effort(thinking: Any) -> str:
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "disabled":
        return "off"
    if kind == "adaptive":  # the model decides how much: its middle effort
        return "medium"
    if kind != "enabled":
        raise _fail("thinking", "must be an object whose type is enabled, adaptive or disabled")
    budget = thinking.get("budget_tokens")
    if not _is_int(budget) or budget < 1:
        raise _fail("thinking.budget_tokens", "required integer >= 1 when thinking is enabled")
    return next((effort for bound, effort in EFFORT_BOUNDS if budget < bound), "high")


def _sampling(body: dict[str, Any], chat: dict[str, Any]) -> None:
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            if not _is_number(body[name]):
                raise _fail(name, "must be a number")
            chat[name] = body[name]
    if body.get("top_k") is not None:
        if not _is_int(body["top_k"]) or body["top_k"] < 0:
            raise _fail("top_k", "must be an integer >= 0")
        chat["top_k"] = body["top_k"]
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(stop, str) and stop for stop in stops):
            raise _fail("stop_sequences", "must be an array of non-empty strings")
        if stops:
            chat["stop"] = stops


def to_chat(body: dict[str, Any], *, counting: bool = False) -> dict[str, Any]:
    """The chat-completions body for a Messages request (for count_tokens when `counting`: no
    `max_tokens` needed, sampling ignored). `metadata.user_id` becomes chat's `user`, which routes
    `affinity` pools; nothing of `metadata` is stored."""
    model = body.get("model")
    if not isinstance(model, str) or not model or len(model) > MAX_MODEL_LENGTH:
        raise _fail("model", f"required string of 1 to {MAX_MODEL_LENGTH} characters")
    chat: dict[str, Any] = {"model": model, "messages": _messages(body)}
    _tools(body, chat)
    if body.get("thinking") is not None:
        chat["reasoning_effort"] = _reasoning_effort(body["thinking"])
    if counting:
        return chat
    max_tokens = body.get("max_tokens")
    if not _is_int(max_tokens) or max_tokens < 1:
        raise _fail("max_tokens", "required integer >= 1")
    chat["max_tokens"] = max_tokens
    _sampling(body, chat)
    if body.get("stream") is not None:
        if not isinstance(body["stream"], bool):
            raise _fail("stream", "must be a boolean")
        chat["stream"] = body["stream"]
    metadata = body.get("metadata")
    if metadata is not None:
        user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
        if not isinstance(metadata, dict) or (user_id is not None and not isinstance(user_id, str)):
            raise _fail("metadata", "must be an object with an optional string user_id")
        if user_id:
            chat["user"] = user_id
    return chat


def thinking_on(chat: dict[str, Any]) -> bool:
    """Whether the request asked for thinking: only then do replies carry thinking blocks."""
    return chat.get("reasoning_effort") not in (None, "off")


def message_id() -> str:
    """A fresh `msg_…` id."""
    return "msg_" + uuid.uuid4().hex[:24]


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the `input` object (a model's unparseable JSON is kept, as a string
    under `arguments`, rather than lost)."""
    if not arguments:
        return {}
    try:
        parsed = orjson.loads(arguments)
    except (orjson.JSONDecodeError, TypeError):
        return {"arguments": str(arguments)}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def stop_of(choice: dict[str, Any], called_tools: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a choice. Only an engine that says which stop string ended
    the reply (vLLM's `stop_reason`) gives `stop_sequence`; others end with `end_turn`."""
    finish = choice.get("finish_reason")
    matched = choice.get("stop_reason")
    if finish == "stop" and isinstance(matched, str) and matched:
        return "stop_sequence", matched
    if called_tools and finish in (None, "stop"):
        return "tool_use", None  # engines that end a tool call with plain `stop`
    return STOP_REASONS.get(finish or "stop", "end_turn"), None


def usage_of(prompt: int, completion: int, cached: int) -> dict[str, int]:
    """Anthropic's usage: `input_tokens` excludes the prompt tokens read from the prefix cache,
    so input_tokens + cache_read_input_tokens is the prompt that was billed."""
    return {"input_tokens": prompt - cached, "output_tokens": completion, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0}


def from_chat(completion: dict[str, Any], usage: dict[str, int], *, thinking: bool) -> dict[str, Any]:
    """The message for a chat completion (its first choice)."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    reply = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = reply.get("reasoning") or reply.get("reasoning_content")
    if thinking and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"]})
    calls = [call for call in reply.get("tool_calls") or () if isinstance(call, dict)]
    for call in calls:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                        "name": function.get("name") or "", "input": tool_input(function.get("arguments"))})
    stop_reason, stop_sequence = stop_of(choice, bool(calls))
    return {"id": message_id(), "type": "message", "role": "assistant", "model": completion.get("model"),
            "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    return ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def error_message(exc: InferdError) -> str:
    """The error's message; for an engine's relayed rejection, the message the engine gave."""
    if isinstance(exc, RelayedError):
        try:
            parsed = orjson.loads(exc.raw_body)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            inner = parsed.get("error") if isinstance(parsed.get("error"), dict) else parsed
            if isinstance(inner.get("message"), str):
                return str(inner["message"])
        return exc.raw_body.decode("utf-8", "replace")[:2000] or exc.message
    return exc.message


def error_envelope(exc: InferdError) -> dict[str, Any]:
    """`{type: "error", error: {type, message}}` for an error answered before a reply started."""
    return {"type": "error", "error": {"type": error_type(exc.status), "message": error_message(exc)}}

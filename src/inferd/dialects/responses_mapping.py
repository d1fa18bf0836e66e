"""OpenAI's Responses API onto chat completions and back: the one place
that knows both dialects, beside the wire shapes (`protocol/responses.py`).

Pure functions over parsed JSON, no I/O: a Responses request becomes the chat-completions body that
`ChatService` runs through the chat corridor, and a completion becomes a response object. Requests
are validated as they are translated (one walk): every failure is a 400 whose message starts with
the field's path. Streams are translated by `dialects/responses_stream.py`.

Input items and the chat messages they make are in `dialects/responses_items.py`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from inferd.dialects.responses_items import chat_messages, input_items, invalid, required_string
from inferd.protocol.chat import REASONING_EFFORTS
from inferd.protocol.checks import check_metadata, check_model

TOOL_CHOICES = ("auto", "none", "required")
# Chat's finish reasons that end a reply early: the response is `incomplete`, and why.
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
# Echoed on the response object, as OpenAI echoes them; everything else comes from the reply.
ECHOED = ("instructions", "max_output_tokens", "previous_response_id", "temperature", "top_p", "user")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def new_id(prefix: str) -> str:
    """A fresh id: `resp_`, `msg_`, `fc_` or `rs_` and 32 hex digits, the first 12 the time in
    milliseconds, as OpenAI's ids start with the time (stored ids then land at the end of the index)."""
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(10)}"


@dataclass(slots=True)
class Translated:
    """A request as the chat corridor takes it, and what the response needs of the request."""

    chat: dict[str, Any]  # the chat-completions body
    input_items: list[dict[str, Any]]  # this request's input items, in normal form (stored)
    echo: dict[str, Any]  # request fields the response object repeats
    metadata: dict[str, str] | None
    store: bool


# --- the rest of the request ------------------------------------------------------------------


def _tools(body: dict[str, Any], chat: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise invalid("tools", "must be an array")
    functions = []
    for i, tool in enumerate(tools):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid(path, "must be an object")
        if tool.get("type") != "function":
            raise invalid(f"{path}.type", f"tool type {tool.get('type')!r} is not served here; only function tools")
        function: dict[str, Any] = {"name": required_string(f"{path}.name", tool.get("name"))}
        if tool.get("description") is not None:
            function["description"] = required_string(f"{path}.description", tool["description"])
        if tool.get("parameters") is not None:
            if not isinstance(tool["parameters"], dict):
                raise invalid(f"{path}.parameters", "must be a JSON Schema object")
            function["parameters"] = tool["parameters"]
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        functions.append({"type": "function", "function": function})
    if functions:
        chat["tools"] = functions


def _tool_choice(choice: Any) -> Any:
    if choice in TOOL_CHOICES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": required_string("tool_choice.name", choice.get("name"))}}
    raise invalid("tool_choice", "must be auto, none, required or {type: function, name}")


def _text_format(text: Any) -> dict[str, Any] | None:
    """`text.format` as chat's `response_format` (None for plain text)."""
    if not isinstance(text, dict):
        raise invalid("text", "must be an object")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise invalid("text.format.type", "must be text, json_object or json_schema")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise invalid("text.format.schema", "required JSON Schema object")
    spec: dict[str, Any] = {"name": required_string("text.format.name", fmt.get("name")), "schema": schema}
    for name in ("strict", "description"):
        if fmt.get(name) is not None:
            spec[name] = fmt[name]
    return {"type": "json_schema", "json_schema": spec}


def _reasoning_effort(reasoning: Any) -> str | None:
    if not isinstance(reasoning, dict):
        raise invalid("reasoning", "must be an object")
    effort = reasoning.get("effort")
    if effort is None:
        return None
    if effort == "xhigh":
        return "high"
    if effort not in REASONING_EFFORTS:
        raise invalid("reasoning.effort", "must be none, minimal, low, medium or high")
    return REASONING_EFFORTS[effort]


def _sampling(body: dict[str, Any], chat: dict[str, Any]) -> None:
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            if not _is_number(body[name]):
                raise invalid(name, "must be a number")
            chat[name] = body[name]
    limit = body.get("max_output_tokens")
    if limit is not None:
        if not _is_int(limit) or limit < 1:
            raise invalid("max_output_tokens", "must be an integer >= 1")
        chat["max_tokens"] = limit
    for name in ("stream", "parallel_tool_calls"):
        if body.get(name) is not None:
            if not isinstance(body[name], bool):
                raise invalid(name, "must be a boolean")
            chat[name] = body[name]


def to_chat(body: dict[str, Any], history: list[dict[str, Any]] | None = None) -> Translated:
    """The chat-completions body for a Responses request; `history`: the input items of the
    response it continues (`previous_response_id`), which come before its own input."""
    model = check_model(body)
    items = input_items(body.get("input"))
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("instructions", "must be a string")
    chat: dict[str, Any] = {"model": model, "messages": chat_messages(instructions, [*(history or ()), *items])}
    if not chat["messages"]:
        raise invalid("input", "required: at least one input item")
    _tools(body, chat)
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("text") is not None:
        response_format = _text_format(body["text"])
        if response_format is not None:
            chat["response_format"] = response_format
    if body.get("reasoning") is not None:
        effort = _reasoning_effort(body["reasoning"])
        if effort is not None:
            chat["reasoning_effort"] = effort
    _sampling(body, chat)
    user = body.get("user")
    if user is not None:
        chat["user"] = required_string("user", user)
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise invalid("previous_response_id", "must be a string")
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise invalid("store", "must be a boolean")
    if body.get("background"):
        raise invalid("background", "background responses are not served here")
    echo = {name: body.get(name) for name in ECHOED}
    echo["tools"] = body.get("tools") or []
    echo["tool_choice"] = body.get("tool_choice") or "auto"
    echo["parallel_tool_calls"] = body.get("parallel_tool_calls", True)
    echo["text"] = body.get("text") if isinstance(body.get("text"), dict) else {"format": {"type": "text"}}
    echo["reasoning"] = {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None}
    echo["store"] = store
    return Translated(chat, items, echo, check_metadata(body.get("metadata")), store)


def continue_from(translated: Translated, history: list[dict[str, Any]]) -> None:
    """Put the conversation a `previous_response_id` names before the request's own input (the
    earlier turns' instructions are not carried over, as OpenAI does)."""
    if history:
        translated.chat["messages"] = chat_messages(translated.echo["instructions"],
                                                    [*history, *translated.input_items])


# --- the reply --------------------------------------------------------------------------------


def usage_of(prompt: int, completion: int, cached: int, reasoning: int = 0) -> dict[str, Any]:
    """The Responses usage object (`input_tokens` includes the cached ones, as OpenAI counts)."""
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion}


def reasoning_tokens(usage: Any) -> int:
    """`completion_tokens_details.reasoning_tokens` of a chat usage object, when the engine says."""
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if _is_int(value) else 0


def message_item(text: str, status: str, item_id: str | None = None) -> dict[str, Any]:
    """An assistant message output item."""
    return {"id": item_id or new_id("msg"), "type": "message", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def function_call_item(call_id: str, name: str, arguments: str, item_id: str | None = None) -> dict[str, Any]:
    """A function call output item."""
    return {"id": item_id or new_id("fc"), "type": "function_call", "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}


def reasoning_item(text: str, item_id: str | None = None) -> dict[str, Any]:
    """A reasoning output item (the engine's reasoning text; no summary is made)."""
    return {"id": item_id or new_id("rs"), "type": "reasoning", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}]}


def status_of(finish_reason: Any) -> tuple[str, dict[str, str] | None]:
    """(status, incomplete_details) for chat's finish reason."""
    reason = INCOMPLETE_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def response_object(response_id: str, created_at: int, model: str, status: str, output: list[dict[str, Any]],
                    usage: dict[str, Any] | None, echo: dict[str, Any], metadata: dict[str, str] | None,
                    incomplete: dict[str, str] | None = None, error: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The response object, in OpenAI's field order."""
    return {"id": response_id, "object": "response", "created_at": created_at, "status": status, "error": error,
            "incomplete_details": incomplete, "model": model, "output": output, "usage": usage,
            "metadata": metadata or {}, "truncation": "disabled", **echo}


def from_chat(completion: dict[str, Any], usage: dict[str, Any], translated: Translated,
              response_id: str | None = None) -> dict[str, Any]:
    """The response object for a chat completion (its first choice)."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    reply = choice.get("message") or {}
    status, incomplete = status_of(choice.get("finish_reason"))
    output: list[dict[str, Any]] = []
    reasoning = reply.get("reasoning") or reply.get("reasoning_content")
    if reasoning and translated.chat.get("reasoning_effort") != "off":
        output.append(reasoning_item(str(reasoning)))
    if reply.get("content"):
        output.append(message_item(str(reply["content"]), "incomplete" if incomplete else "completed"))
    for call in reply.get("tool_calls") or ():
        if isinstance(call, dict):
            function = call.get("function") or {}
            output.append(function_call_item(call.get("id") or new_id("call"), function.get("name") or "",
                                             function.get("arguments") or ""))
    return response_object(response_id or new_id("resp"), int(completion.get("created") or time.time()),
                           str(completion.get("model") or translated.chat["model"]), status, output, usage,
                           translated.echo, translated.metadata, incomplete)

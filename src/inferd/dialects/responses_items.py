"""The Responses API's conversation items: `input` in one normal form,
and the chat messages a list of items makes.

The normal form is what a stored response keeps, so `previous_response_id` can continue it: its
items, then its output (`output_as_input`), then the new input. Failures are 400s whose message
starts with the field's path.
"""

from __future__ import annotations

from typing import Any

import orjson

from inferd.errors import InvalidRequest

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


def invalid(param: str, problem: str) -> InvalidRequest:
    """A 400 naming the field first."""
    return InvalidRequest(f"{param}: {problem}", param=param)


def required_string(path: str, value: Any) -> str:
    """`value`, which must be a string."""
    if not isinstance(value, str):
        raise invalid(path, "required string")
    return value


def _content(path: str, content: Any) -> str | list[dict[str, Any]]:
    """A message's content in normal form: a string, or a list of input_text / input_image parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(path, "required: a string or an array of content parts")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        where = f"{path}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            text = part.get("refusal") if kind == "refusal" else part.get("text")
            parts.append({"type": "input_text", "text": required_string(f"{where}.text", text)})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise invalid(f"{where}.image_url", "required: a URL or a data URL (file_id is not served here)")
            image: dict[str, Any] = {"type": "input_image", "image_url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append(image)
        else:
            raise invalid(f"{where}.type", "must be input_text or input_image")
    return parts


def _output_text(path: str, value: Any) -> str:
    """A function call's output: a string, or text parts joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(required_string(f"{path}[{j}].text", part.get("text") if isinstance(part, dict) else None)
                       for j, part in enumerate(value))
    raise invalid(path, "required string")


def _item(path: str, item: Any) -> dict[str, Any] | None:
    """One input item in normal form (None: an item the chat dialect has no place for)."""
    if not isinstance(item, dict):
        raise invalid(path, "must be an object")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise invalid(f"{path}.role", "must be user, assistant, system or developer")
        return {"type": "message", "role": role, "content": _content(f"{path}.content", item.get("content"))}
    if kind == "function_call":
        arguments = item.get("arguments")
        return {"type": "function_call", "call_id": required_string(f"{path}.call_id", item.get("call_id")),
                "name": required_string(f"{path}.name", item.get("name")),
                "arguments": arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()}
    if kind == "function_call_output":
        return {"type": "function_call_output", "call_id": required_string(f"{path}.call_id", item.get("call_id")),
                "output": _output_text(f"{path}.output", item.get("output"))}
    if kind == "reasoning":
        return None  # earlier reasoning is not replayed to the model
    raise invalid(f"{path}.type", "must be message, function_call, function_call_output or reasoning")


def input_items(value: Any) -> list[dict[str, Any]]:
    """`input` in normal form: a string is one user message."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        raise invalid("input", "required: a string or an array of input items")
    items = [_item(f"input[{i}]", item) for i, item in enumerate(value)]
    return [item for item in items if item is not None]


def output_as_input(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stored response's output items as input items of the next turn."""
    items = []
    for item in output:
        if item.get("type") == "message":
            text = "".join(part.get("text", "") for part in item.get("content") or ()
                           if part.get("type") == "output_text")
            items.append({"type": "message", "role": "assistant", "content": text})
        elif item.get("type") == "function_call":
            items.append({"type": "function_call", "call_id": item["call_id"], "name": item["name"],
                          "arguments": item["arguments"]})
    return items


def _chat_content(content: str | list[dict[str, Any]]) -> Any:
    if isinstance(content, str):
        return content
    if len(content) == 1 and content[0]["type"] == "input_text":
        return content[0]["text"]  # the plainest shape every chat template takes
    parts: list[dict[str, Any]] = []
    for part in content:
        if part["type"] == "input_text":
            parts.append({"type": "text", "text": part["text"]})
        else:
            image = {"url": part["image_url"], **({"detail": part["detail"]} if "detail" in part else {})}
            parts.append({"type": "image_url", "image_url": image})
    return parts


def chat_messages(instructions: str | None, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages for the items: consecutive function calls join the assistant turn before them."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        kind = item["type"]
        if kind == "message":
            role = ROLES[item["role"]]
            content = _chat_content(item["content"])
            if role != "user" and not isinstance(content, str):
                content = "".join(part.get("text", "") for part in content)
            if role == "system" and messages and all(m["role"] == "system" for m in messages):
                # Many chat templates take one system message, first: leading ones become one.
                messages[-1]["content"] += "\n\n" + content
                continue
            messages.append({"role": role, "content": content})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
    return messages

"""The cache key of a request: its scope, the canonical model id and every field that can change
the output, in one canonical form.

Fields are left out by name, never kept by name: a field the gateway does not know (forwarded to
the engine untouched) may change the output, so it is part of the key; only `user`, `metadata`,
`stream` and `stream_options` (and the model's name as the client wrote it: an alias and the
canonical id are one model) are not. The form is canonical JSON (sorted keys, no spaces), so two
requests that differ only in the order of their fields have one key, whatever the process or
replica (no hash seed, no dict order), and its SHA-256 is the key.

Dialects share entries: the Messages and Responses dialects are keyed on the chat body they are
translated to, and `chat_form` takes out what translation writes differently for the same
conversation (a text-only content list versus a string, the defaults the chat corridor fills in).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

# Never part of the key: who asked, how the answer is framed, what is stored beside it.
IGNORED = frozenset({"model", "user", "metadata", "stream", "stream_options", "store", "service_tier"})
# Fields whose absence and this value ask the engine for the same thing (the chat corridor's defaults).
DEFAULTS = {"top_p": 1.0, "n": 1, "tool_choice": None, "tools": None, "stop": None, "seed": None,
            "response_format": None, "reasoning_effort": None, "presence_penalty": 0, "frequency_penalty": 0}


def _content(content: Any) -> Any:
    """A content list of text parts only is the same message as its text joined."""
    if isinstance(content, list) and content and all(
            isinstance(part, dict) and part.get("type") == "text" and set(part) <= {"type", "text"}
            for part in content):
        return "".join(str(part.get("text") or "") for part in content)
    return content


def _message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    shaped = {k: v for k, v in message.items() if v is not None and not (k == "tool_calls" and v == [])}
    if "content" in shaped:
        shaped["content"] = _content(shaped["content"])
    return shaped


def chat_form(body: dict[str, Any]) -> dict[str, Any]:
    """The fields of a chat body that can change the output, in one form for every dialect."""
    form: dict[str, Any] = {}
    for name, value in body.items():
        if name in IGNORED or value is None or (name in DEFAULTS and value == DEFAULTS[name]):
            continue
        if name == "messages" and isinstance(value, list):
            value = [_message(m) for m in value]
        elif name == "max_completion_tokens":
            name = "max_tokens"  # the same limit under its newer name
        form[name] = value
    return form


def cache_key(scope: str, model_id: str, capability: str, form: dict[str, Any]) -> str:
    """The entry's key: hex SHA-256 of the scope, the capability, the canonical model id and the form."""
    canonical = orjson.dumps([scope, capability, model_id, form], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def deterministic(body: dict[str, Any]) -> bool:
    """Whether the output is determined by the request: temperature 0, or a seed."""
    temperature = body.get("temperature")
    seed = body.get("seed")
    return (temperature is not None and not isinstance(temperature, bool) and temperature == 0) or \
        (seed is not None and not isinstance(seed, bool) and isinstance(seed, int))

"""Chat templates (Jinja, as Hugging Face tokenizers and GGUF files store them), rendered the
way `transformers.apply_chat_template` does: sandboxed, trim_blocks, lstrip_blocks, its `tojson`."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from inferd.errors import InvalidRequest


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class ChatTemplate:
    """One compiled template (and an optional variant for requests with tools)."""

    def __init__(self, template: str, tool_template: str | None = None, bos_token: str = "",
                 eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._default = env.from_string(template)
        self._tools = env.from_string(tool_template) if tool_template else self._default
        self._special = {"bos_token": bos_token, "eos_token": eos_token}

    def render(self, payload: dict[str, Any]) -> str:
        """The prompt text for a chat payload, ready for the assistant's reply."""
        tools = payload.get("tools") or None
        variables: dict[str, Any] = {"messages": payload.get("messages") or [], "tools": tools,
                                     "add_generation_prompt": True, **self._special}
        if payload.get("reasoning_effort"):
            variables["reasoning_effort"] = payload["reasoning_effort"]
            variables["enable_thinking"] = payload["reasoning_effort"] != "off"
        try:
            return (self._tools if tools else self._default).render(**variables)
        except (TemplateError, TypeError, ValueError) as exc:
            raise InvalidRequest(f"messages: the model's chat template rejected them: {exc}",
                                 param="messages") from None


def text_only(messages: list[dict[str, Any]], model_id: str) -> list[dict[str, Any]]:
    """Messages with content-part arrays joined into strings, for templates of text-only models
    (which concatenate `content`); an image part is a 400 naming the model."""
    flat = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            if any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
                raise InvalidRequest(f"messages[{i}].content: model '{model_id}' does not accept images",
                                     param=f"messages[{i}].content")
            message = {**message, "content": "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))}
        flat.append(message)
    return flat

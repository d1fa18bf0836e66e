"""Exact prompt counts from a local Hugging Face tokenizer (`tokenizer = "hf:PATH"`).

PATH is a folder holding `tokenizer.json` and `tokenizer_config.json` (whose `chat_template`
renders the prompt), or the `tokenizer.json` file itself with the config beside it. The
template is rendered the way `transformers.apply_chat_template` does (sandboxed Jinja,
trim_blocks, lstrip_blocks, its `tojson`) and the text encoded without added special tokens.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from inferd.errors import ConfigError, InvalidRequest


def tokenizer_files(path: Path) -> tuple[Path, Path]:
    """(tokenizer.json, tokenizer_config.json) for a folder or a tokenizer.json path."""
    if path.is_dir():
        return path / "tokenizer.json", path / "tokenizer_config.json"
    return path, path.with_name("tokenizer_config.json")


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return "" if value is None else str(value)


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class ChatTemplateTokenizer:
    """Renders a chat with the tokenizer's template and counts the tokens."""

    def __init__(self, path: Path) -> None:
        tokenizer_json, config_json = tokenizer_files(path)
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_json))
            config = json.loads(config_json.read_text(encoding="utf-8")) if config_json.exists() else {}
        except (OSError, ValueError, Exception) as exc:  # tokenizers raises a bare Exception
            raise ConfigError(f"tokenizer {path}: cannot load: {exc}") from None
        templates = config.get("chat_template")
        if isinstance(templates, list):  # named templates: default, tool_use, …
            named = {t.get("name"): t.get("template") for t in templates if isinstance(t, dict)}
            self._default = named.get("default") or next(iter(named.values()), None)
            self._tool_use = named.get("tool_use") or self._default
        else:
            self._default = self._tool_use = templates
        if not isinstance(self._default, str):
            raise ConfigError(f"tokenizer {path}: tokenizer_config.json has no chat_template")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._env = env
        self._compiled = {id(t): env.from_string(t) for t in {self._default, self._tool_use} if isinstance(t, str)}
        self._special = {"bos_token": _token_text(config.get("bos_token")),
                         "eos_token": _token_text(config.get("eos_token"))}

    def render(self, payload: dict[str, Any]) -> str:
        """The prompt text the model sees, ready for the assistant's reply."""
        tools = payload.get("tools") or None
        template = self._tool_use if tools else self._default
        variables: dict[str, Any] = {"messages": payload.get("messages") or [], "tools": tools,
                                     "add_generation_prompt": True, **self._special}
        if payload.get("reasoning_effort"):
            variables["reasoning_effort"] = payload["reasoning_effort"]
            variables["enable_thinking"] = payload["reasoning_effort"] != "off"
        try:
            return self._compiled[id(template)].render(**variables)
        except TemplateError as exc:
            raise InvalidRequest(f"messages: the model's chat template rejected them: {exc}",
                                 param="messages") from None

    def count(self, payload: dict[str, Any]) -> int:
        """Prompt tokens for this chat."""
        return len(self._tokenizer.encode(self.render(payload), add_special_tokens=False).ids)

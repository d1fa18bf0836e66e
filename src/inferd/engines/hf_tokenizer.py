"""Exact prompt counts from a local Hugging Face tokenizer (`tokenizer = "hf:PATH"`).

PATH is a folder holding `tokenizer.json` and `tokenizer_config.json` (whose `chat_template`
renders the prompt), or the `tokenizer.json` file itself with the config beside it. The text
is encoded without added special tokens, as `apply_chat_template` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from inferd.engines.chat_template import ChatTemplate
from inferd.errors import ConfigError


def tokenizer_files(path: Path) -> tuple[Path, Path]:
    """(tokenizer.json, tokenizer_config.json) for a folder or a tokenizer.json path."""
    if path.is_dir():
        return path / "tokenizer.json", path / "tokenizer_config.json"
    return path, path.with_name("tokenizer_config.json")


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return "" if value is None else str(value)


class ChatTemplateTokenizer:
    """Renders a chat with the tokenizer's template and counts the tokens."""

    def __init__(self, path: Path) -> None:
        tokenizer_json, config_json = tokenizer_files(path)
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_json))
            config = json.loads(config_json.read_text(encoding="utf-8")) if config_json.exists() else {}
        except Exception as exc:  # tokenizers raises a bare Exception
            raise ConfigError(f"tokenizer {path}: cannot load: {exc}") from None
        templates = config.get("chat_template")
        if isinstance(templates, list):  # named templates: default, tool_use, …
            named = {t.get("name"): t.get("template") for t in templates if isinstance(t, dict)}
            default, tool_use = named.get("default") or next(iter(named.values()), None), named.get("tool_use")
        else:
            default, tool_use = templates, None
        if not isinstance(default, str):
            raise ConfigError(f"tokenizer {path}: tokenizer_config.json has no chat_template")
        self._template = ChatTemplate(default, tool_use, _token_text(config.get("bos_token")),
                                      _token_text(config.get("eos_token")))

    def count(self, payload: dict[str, Any]) -> int:
        """Prompt tokens for this chat."""
        return len(self._tokenizer.encode(self._template.render(payload), add_special_tokens=False).ids)

"""Exact prompt counts from a local Hugging Face tokenizer (`tokenizer = "hf:PATH"`).

PATH is a folder holding `tokenizer.json` and `tokenizer_config.json` (whose `chat_template`
renders the prompt), or the `tokenizer.json` file itself with the config beside it. The text
is encoded without added special tokens, as `apply_chat_template` does.

Counting takes about a millisecond per 10,000 characters (seconds for a 32 MiB prompt), so a
large prompt is counted on a worker thread, through the tokenizer call that releases the GIL
while it encodes, and the event loop keeps serving; a small one is counted inline, where a
thread hop would cost more than the count (about 80 µs against 25 µs for a short chat).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
from tokenizers import Tokenizer

from inferd.engines.chat_template import ChatTemplate
from inferd.errors import ConfigError

INLINE_CHARS = 4096  # prompts up to this size are counted on the event loop (well under a millisecond)
_COUNT_THREADS = 2  # large counts at once; more wait their turn (each holds its prompt's tokens)
_pool: ThreadPoolExecutor | None = None


def tokenizer_files(path: Path) -> tuple[Path, Path]:
    """(tokenizer.json, tokenizer_config.json) for a folder or a tokenizer.json path."""
    if path.is_dir():
        return path / "tokenizer.json", path / "tokenizer_config.json"
    return path, path.with_name("tokenizer_config.json")


def _json_chars(value: Any) -> int:
    try:
        return len(orjson.dumps(value, default=str))
    except (orjson.JSONEncodeError, TypeError):  # what orjson cannot write (a >64-bit integer): count it large
        return INLINE_CHARS + 1


def prompt_chars(payload: dict[str, Any]) -> int:
    """About how many characters the template will render: the messages' text and framing, their
    tool calls and the tool definitions (len() of a str is free; the JSON is measured by orjson)."""
    total = 0
    for message in payload.get("messages") or ():
        total += 16  # the template's framing: many empty messages still take long to render
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(part["text"]) for part in content
                         if isinstance(part, dict) and isinstance(part.get("text"), str))
        if message.get("tool_calls"):
            total += _json_chars(message["tool_calls"])
    if payload.get("tools"):
        total += _json_chars(payload["tools"])
    return total


def _count_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_COUNT_THREADS, thread_name_prefix="hf-count")
    return _pool


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
        """Prompt tokens for this chat (blocking, and holding the GIL: see count_async)."""
        return len(self._tokenizer.encode(self._template.render(payload), add_special_tokens=False).ids)

    def _count_releasing(self, payload: dict[str, Any]) -> int:
        # encode() keeps the GIL for the whole encoding (seconds for a large prompt, every other
        # thread stalled, the event loop's too); encode_batch() lets it go while it works.
        text = self._template.render(payload)
        return len(self._tokenizer.encode_batch([text], add_special_tokens=False)[0].ids)

    async def count_async(self, payload: dict[str, Any]) -> int:
        """Prompt tokens for this chat, counted on a worker thread unless the prompt is small."""
        if prompt_chars(payload) <= INLINE_CHARS:
            return self.count(payload)
        return await asyncio.get_running_loop().run_in_executor(_count_pool(), self._count_releasing, payload)

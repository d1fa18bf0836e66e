"""A chat-completions stream turned into Anthropic's Messages events.

Chat chunks (parsed) go in one at a time; SSE bytes come out: `message_start` and a `ping`, then
each content block opened, grown by deltas (`text_delta`, `thinking_delta`, `input_json_delta`)
and stopped, then `message_delta` with the stop reason and usage, and `message_stop`. An error
chunk after the start becomes an `error` event, and nothing follows it.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

from inferd.dialects.chunk_stream import ChunkStream
from inferd.dialects.messages_mapping import message_id, stop_of, usage_of

# A block's delta events, by the block's kind, up to the delta itself (`%d` the block's index).
_DELTAS = {kind: b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":{"type":"'
                 + delta + b'","' + field + b'":'
           for kind, delta, field in (("reasoning", b"thinking_delta", b"thinking"), ("text", b"text_delta", b"text"),
                                      ("tool", b"input_json_delta", b"partial_json"))}
_BLOCK_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def event(name: str, data: dict[str, Any]) -> bytes:
    """One SSE event."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(error_type: str, message: str) -> bytes:
    """The `error` event that ends a stream that broke after it started."""
    return event("error", {"type": "error", "error": {"type": error_type, "message": message}})


class MessageStream(ChunkStream):
    """The state of one translated stream: the open block, the stop reason and the usage seen."""

    __slots__ = ("_input_tokens", "_index", "_called", "failed")

    dialect = "messages"

    def __init__(self, thinking: bool, cached_counts: Callable[[str], bool], input_tokens: int | None = None) -> None:
        """`thinking`: whether reasoning goes out as thinking blocks; `cached_counts(model)`: whether
        that model reports prefix-cache hits (its `prefix_cache`), as its usage rows do;
        `input_tokens`: the prompt's size when already counted."""
        super().__init__(thinking, cached_counts)
        self._input_tokens = input_tokens
        self._index = -1  # the open block's index, -1 before the first
        self._called = False
        self.failed = False

    def start(self, first: dict[str, Any], input_tokens: int | None = None) -> bytes:
        """`message_start` and a `ping`, then what the first chunk holds. `input_tokens`: the prompt's
        size when already counted (by default the one the stream was made with; the final
        `message_delta` always says it)."""
        self._model = str(first.get("model") or "")
        counted = self._input_tokens if input_tokens is None else input_tokens
        message = {"id": message_id(), "type": "message", "role": "assistant", "model": self._model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": counted or 0, "output_tokens": 0}}
        return event("message_start", {"type": "message_start", "message": message}) + _PING + self.feed(first)

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        closing = self._close()
        self._index += 1
        self._kind = kind
        self._delta_head = _DELTAS[kind] % self._index
        return closing + event("content_block_start", {"type": "content_block_start", "index": self._index,
                                                       "content_block": block})

    def _close(self) -> bytes:
        if not self._kind:
            return b""
        self._kind = ""
        return _BLOCK_STOP % self._index

    def _failed(self, error: Any) -> bytes:
        return self.fail(error.get("message") or "The engine failed", "api_error")

    def _open_reasoning(self) -> bytes:
        return self._open("reasoning", {"type": "thinking", "thinking": "", "signature": ""})

    def _open_text(self) -> bytes:
        return self._open("text", {"type": "text", "text": ""})

    def _open_tool(self, call_id: str | None, name: str) -> bytes:
        self._called = True
        self._tool_id = call_id or "toolu_" + message_id()[4:]
        return self._open("tool", {"type": "tool_use", "id": self._tool_id, "name": name, "input": {}})

    def _delta(self, text: str) -> bytes:
        return self._delta_head + orjson.dumps(text) + b"}}\n\n"

    def finish(self) -> bytes:
        """The open block's stop, `message_delta` (stop reason, usage) and `message_stop`; nothing
        after a failure."""
        if self.failed:
            return b""
        stop_reason, stop_sequence = stop_of(self._choice, self._called)
        _, prompt, completion, cached = self._counted_usage()
        numbers = usage_of(prompt, completion, cached)
        return self._close() + event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": numbers}) + _MESSAGE_STOP

    def fail(self, message: str, error_type: str = "api_error") -> bytes:
        """The `error` event for a stream that broke after it started (the open block is left open,
        as Anthropic leaves it)."""
        self.failed = True
        return error_event(error_type, message)

"""A chat-completions stream turned into Anthropic's Messages events.

Chat chunks (parsed) go in one at a time; SSE bytes come out: `message_start` and a `ping`, then
each content block opened, grown by deltas (`text_delta`, `thinking_delta`, `input_json_delta`)
and stopped, then `message_delta` with the stop reason and usage, and `message_stop`. An error
chunk after the start becomes an `error` event, and nothing follows it.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

from inferd.dialects.messages_mapping import message_id, stop_of, usage_of

_TEXT_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
               b'"delta":{"type":"text_delta","text":')
_JSON_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
               b'"delta":{"type":"input_json_delta","partial_json":')
_THINKING_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                   b'"delta":{"type":"thinking_delta","thinking":')
_BLOCK_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def event(name: str, data: dict[str, Any]) -> bytes:
    """One SSE event."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(error_type: str, message: str) -> bytes:
    """The `error` event that ends a stream that broke after it started."""
    return event("error", {"type": "error", "error": {"type": error_type, "message": message}})


class MessageStream:
    """The state of one translated stream: the open block, the stop reason and the usage seen."""

    __slots__ = ("_thinking", "_cached_counts", "_model", "_index", "_kind", "_tool_index", "_tool_id", "_called",
                 "_choice", "_usage", "failed")

    def __init__(self, thinking: bool, cached_counts: Callable[[str], bool]) -> None:
        """`thinking`: whether reasoning goes out as thinking blocks; `cached_counts(model)`: whether
        that model reports prefix-cache hits (its `prefix_cache`), as its usage rows do."""
        self._thinking = thinking
        self._cached_counts = cached_counts
        self._model = ""
        self._index = -1  # the open block's index, -1 before the first
        self._kind = ""  # the open block's type, "" when none is open
        self._tool_index: Any = None  # chat's index of the tool call the open tool_use block carries
        self._tool_id = ""
        self._called = False
        self._choice: dict[str, Any] = {}  # finish_reason and stop_reason, as chat's last choice said
        self._usage: Any = None
        self.failed = False

    def start(self, first: dict[str, Any], input_tokens: int | None) -> bytes:
        """`message_start` and a `ping`, then what the first chunk holds. `input_tokens`: the prompt's
        size when already counted (the final `message_delta` always says it)."""
        self._model = str(first.get("model") or "")
        message = {"id": message_id(), "type": "message", "role": "assistant", "model": self._model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": input_tokens or 0, "output_tokens": 0}}
        return event("message_start", {"type": "message_start", "message": message}) + _PING + self.feed(first)

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        closing = self._close()
        self._index += 1
        self._kind = kind
        return closing + event("content_block_start", {"type": "content_block_start", "index": self._index,
                                                       "content_block": block})

    def _close(self) -> bytes:
        if not self._kind:
            return b""
        self._kind = ""
        return _BLOCK_STOP % self._index

    def feed(self, chunk: dict[str, Any]) -> bytes:
        """The events one chat chunk makes (often none)."""
        if "error" in chunk:
            return self.fail(chunk["error"].get("message") or "The engine failed", "api_error")
        out = b""
        if "usage" in chunk and chunk["usage"]:
            self._usage = chunk["usage"]
        # Membership tests before lookups: most chunks carry one text delta, and this runs per token.
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            if delta:
                if self._thinking:
                    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
                    if reasoning:
                        if self._kind != "thinking":
                            out += self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                        out += _THINKING_DELTA % self._index + orjson.dumps(reasoning) + b"}}\n\n"
                text = delta.get("content")
                if text:
                    if self._kind != "text":
                        out += self._open("text", {"type": "text", "text": ""})
                    out += _TEXT_DELTA % self._index + orjson.dumps(text) + b"}}\n\n"
                if "tool_calls" in delta:
                    for call in delta["tool_calls"] or ():
                        out += self._tool_delta(call)
            if "finish_reason" in choice and choice["finish_reason"]:
                self._choice = choice
        return out

    def feed_all(self, batch: list[bytes]) -> bytes:
        """The events of a batch of chunks' JSON bytes, all together."""
        return b"".join([self.feed(orjson.loads(data)) for data in batch])

    def _tool_delta(self, call: dict[str, Any]) -> bytes:
        out = b""
        function = call.get("function") or {}
        index = call.get("index", self._tool_index)
        call_id = call.get("id")
        if self._kind != "tool_use" or index != self._tool_index or (call_id and call_id != self._tool_id):
            self._called = True
            self._tool_index = index
            self._tool_id = call_id or "toolu_" + message_id()[4:]
            out = self._open("tool_use", {"type": "tool_use", "id": self._tool_id,
                                          "name": function.get("name") or "", "input": {}})
        arguments = function.get("arguments")
        if arguments:
            out += _JSON_DELTA % self._index + orjson.dumps(arguments) + b"}}\n\n"
        return out

    def finish(self) -> bytes:
        """The open block's stop, `message_delta` (stop reason, usage) and `message_stop`; nothing
        after a failure."""
        if self.failed:
            return b""
        stop_reason, stop_sequence = stop_of(self._choice, self._called)
        usage = self._usage if isinstance(self._usage, dict) else {}
        prompt = int(usage.get("prompt_tokens") or 0)
        details = usage.get("prompt_tokens_details")
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        if cached and not self._cached_counts(self._model):
            cached = 0
        numbers = usage_of(prompt, int(usage.get("completion_tokens") or 0), cached)
        return self._close() + event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": numbers}) + _MESSAGE_STOP

    def fail(self, message: str, error_type: str = "api_error") -> bytes:
        """The `error` event for a stream that broke after it started (the open block is left open,
        as Anthropic leaves it)."""
        self.failed = True
        return error_event(error_type, message)

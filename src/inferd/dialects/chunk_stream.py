"""What the stream translations of the dialects share: chat chunks in, a dialect's SSE events out.

`MessageStream` (Anthropic's Messages) and `ResponseStream` (OpenAI's Responses) each keep the
state of one translated stream; this base holds what they do alike: the batches of chunk JSON the
chat corridor hands over, each chunk's reasoning, text and tool-call deltas sorted into blocks
(a block opens when the kind of delta changes, or another tool call begins), the finishing choice,
and the usage the chunks reported (with cache hits only from a model that counts them). A dialect
says how its blocks open and what a delta's event is. The route relays the bytes
(`api/sse_relay.py`), one write per batch.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson


class ChunkStream:
    """The state every dialect's stream keeps, and the steps that are the same in each."""

    __slots__ = ("_reasons", "_cached_counts", "_model", "_kind", "_delta_head", "_tool_index", "_tool_id",
                 "_choice", "_usage")

    dialect = ""  # the dialect's name, for the log of a stream that broke

    def __init__(self, reasons: bool, cached_counts: Callable[[str], bool]) -> None:
        """`reasons`: whether reasoning deltas go out (else they are dropped); `cached_counts(model)`:
        whether that model reports prefix-cache hits (its `prefix_cache`), as its usage rows do."""
        self._reasons = reasons
        self._cached_counts = cached_counts
        self._model = ""
        # The open block's (item's) kind, whatever the dialect calls it: "reasoning", "text" or
        # "tool", "" when none is open. Compared as constants: this runs per token.
        self._kind = ""
        self._delta_head = b""  # the open block's delta event up to the delta itself
        self._tool_index: Any = None  # chat's index of the tool call the open tool block carries
        self._tool_id = ""  # that tool call's id
        self._choice: dict[str, Any] = {}  # chat's last choice that said a finish_reason
        self._usage: Any = None

    def start(self, first: dict[str, Any]) -> bytes:
        """The dialect's opening events, then what the first chunk holds."""
        raise NotImplementedError

    def finish(self) -> bytes:
        """The events that end a stream whose chunks all came; nothing after a failure."""
        raise NotImplementedError

    def fail(self, message: str) -> bytes:
        """The event that ends a stream that broke after it started."""
        raise NotImplementedError

    def _failed(self, error: Any) -> bytes:
        """The event of an error chunk (the engine broke after the start): the stream's end."""
        raise NotImplementedError

    def _open_reasoning(self) -> bytes:
        """Open a reasoning block: its events."""
        raise NotImplementedError

    def _open_text(self) -> bytes:
        """Open a text block: its events."""
        raise NotImplementedError

    def _open_tool(self, call_id: str | None, name: str) -> bytes:
        """Open the block of a tool call (setting `_tool_id`): its events."""
        raise NotImplementedError

    def _delta(self, text: str) -> bytes:
        """The open block's delta event: its text, reasoning or arguments grew by `text`."""
        raise NotImplementedError

    def feed(self, chunk: dict[str, Any]) -> bytes:
        """The events one chat chunk makes (often none)."""
        if "error" in chunk:
            return self._failed(chunk["error"])
        out = b""
        if "usage" in chunk and chunk["usage"]:
            self._usage = chunk["usage"]
        # Membership tests before lookups: most chunks carry one text delta, and this runs per token.
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            if delta:
                if self._reasons:
                    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
                    if reasoning:
                        if self._kind != "reasoning":
                            out += self._open_reasoning()
                        out += self._delta(reasoning)
                text = delta.get("content")
                if text:
                    if self._kind != "text":
                        out += self._open_text()
                    out += self._delta(text)
                if "tool_calls" in delta:
                    for call in delta["tool_calls"] or ():
                        out += self._tool_delta(call)
            if "finish_reason" in choice and choice["finish_reason"]:
                self._choice = choice
        return out

    # Work the relay awaits between `finish` and sending its bytes (a dialect that stores its
    # result names a coroutine function here); None: nothing, and no await.
    settle: Callable[[], Any] | None = None

    def opening(self, batch: list[bytes]) -> bytes:
        """The events of the first batch of chunks' JSON bytes: the opening ones, then the rest."""
        first, *rest = batch
        return self.start(orjson.loads(first)) + self.feed_all(rest)

    def feed_all(self, batch: list[bytes]) -> bytes:
        """The events of a batch of chunks' JSON bytes, all together."""
        return b"".join([self.feed(orjson.loads(data)) for data in batch])

    def _tool_delta(self, call: dict[str, Any]) -> bytes:
        """A tool call's delta: a new tool block when it is another call than the open block's, then
        its arguments."""
        out = b""
        function = call.get("function") or {}
        index = call.get("index", self._tool_index)
        call_id = call.get("id")
        if self._kind != "tool" or index != self._tool_index or (call_id and call_id != self._tool_id):
            self._tool_index = index
            out = self._open_tool(call_id, function.get("name") or "")
        arguments = function.get("arguments")
        if arguments:
            out += self._delta(arguments)
        return out

    def _counted_usage(self) -> tuple[dict[str, Any], int, int, int]:
        """The usage the chunks reported (empty when none), its prompt and completion tokens, and
        its cache hits (0 from a model that does not count them)."""
        usage = self._usage if isinstance(self._usage, dict) else {}
        details = usage.get("prompt_tokens_details")
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        if cached and not self._cached_counts(self._model):
            cached = 0
        return usage, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), cached

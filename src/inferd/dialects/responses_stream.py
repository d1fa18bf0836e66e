"""A chat-completions stream turned into the Responses API's typed events.

Chat chunks (parsed) go in one at a time; SSE bytes come out, each event with its
`sequence_number`: `response.created` and `response.in_progress`, then each output item added,
grown by deltas (`response.output_text.delta`, `response.function_call_arguments.delta`,
`response.reasoning_text.delta`) and done, then `response.completed` with the usage: also when
the reply was cut by `max_output_tokens` (the response's `status` is then `incomplete`), since
every stream ends with `response.completed` or `response.failed`. An error chunk after the start becomes
`response.failed`, and nothing follows it. `response` holds the final response object, for storing.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import orjson

from inferd.dialects.chunk_stream import ChunkStream
from inferd.dialects.responses_mapping import (Translated, function_call_item, message_item, new_id,
                                               reasoning_item, reasoning_tokens, response_object, status_of,
                                               usage_of)

# The per-token events are built from bytes templates, by the item's kind: `%s` the item id, `%d`
# the output index, then the sequence number and the delta.
_DELTAS = {kind: b'event: ' + name + b'\ndata: {"type":"' + name + b'","item_id":"%s","output_index":%d,' + fields
                 + b'"sequence_number":'
           for kind, name, fields in (
               ("text", b"response.output_text.delta", b'"content_index":0,"logprobs":[],'),
               ("tool", b"response.function_call_arguments.delta", b""),
               ("reasoning", b"response.reasoning_text.delta", b'"content_index":0,'))}


class ResponseStream(ChunkStream):
    """The state of one translated stream: the open output item, the finish reason and the usage."""

    __slots__ = ("_translated", "_id", "_created", "_sequence", "_output", "_item", "_pieces", "response")

    dialect = "responses"

    def __init__(self, translated: Translated, cached_counts: Callable[[str], bool],
                 response_id: str | None = None) -> None:
        """`cached_counts(model)`: whether that model reports prefix-cache hits (its `prefix_cache`),
        as its usage rows do."""
        super().__init__(translated.chat.get("reasoning_effort") != "off", cached_counts)
        self._translated = translated
        self._id = response_id or new_id("resp")
        self._created = 0
        self._sequence = 0
        self._output: list[dict[str, Any]] = []
        self._item: dict[str, Any] = {}  # the open item
        self._pieces: list[str] = []  # the open item's text or arguments so far
        self.response: dict[str, Any] | None = None  # the final response object, once finished or failed

    def _event(self, name: str, data: dict[str, Any]) -> bytes:
        data = {"type": name, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def _snapshot(self, status: str, output: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
        return response_object(self._id, self._created, self._model, status, list(self._output) if output is None
                               else output, fields.pop("usage", None), self._translated.echo,
                               self._translated.metadata, **fields)

    def _with_partial(self) -> list[dict[str, Any]]:
        """The output so far, the open item as far as it got (`incomplete`)."""
        if not self._kind:
            return list(self._output)
        item, text = self._item, "".join(self._pieces)
        if self._kind == "text":
            partial = message_item(text, "incomplete", item["id"])
        elif self._kind == "reasoning":
            partial = reasoning_item(text, item["id"])
        else:
            partial = {**function_call_item(item["call_id"], item["name"], text, item["id"]), "status": "incomplete"}
        return [*self._output, partial]

    def start(self, first: dict[str, Any]) -> bytes:
        """`response.created` and `response.in_progress`, then what the first chunk holds."""
        self._model = str(first.get("model") or self._translated.chat["model"])
        created = first.get("created")
        self._created = created if isinstance(created, int) else int(time.time())
        snapshot = orjson.dumps(self._snapshot("in_progress"))  # once for both events
        opening = b"".join(
            b'event: %s\ndata: {"type":"%s","sequence_number":%d,"response":%s}\n\n' % (name, name, number, snapshot)
            for number, name in enumerate((b"response.created", b"response.in_progress")))
        self._sequence = 2
        return opening + self.feed(first)

    def _delta(self, text: str) -> bytes:
        self._pieces.append(text)
        head = self._delta_head + b"%d,\"delta\":" % self._sequence
        self._sequence += 1
        return head + orjson.dumps(text) + b"}\n\n"

    def _open(self, kind: str, item: dict[str, Any]) -> bytes:
        out = self._close()
        self._kind, self._item, self._pieces = kind, item, []
        index = len(self._output)
        self._delta_head = _DELTAS[self._kind] % (item["id"].encode(), index)
        out += self._event("response.output_item.added", {"output_index": index, "item": item})
        if self._kind == "text":
            out += self._event("response.content_part.added", {
                "item_id": item["id"], "output_index": index, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []}})
        elif self._kind == "reasoning":
            out += self._event("response.content_part.added", {
                "item_id": item["id"], "output_index": index, "content_index": 0,
                "part": {"type": "reasoning_text", "text": ""}})
        return out

    def _close(self) -> bytes:
        if not self._kind:
            return b""
        kind, item, text = self._kind, self._item, "".join(self._pieces)
        self._kind = ""
        index = len(self._output)
        where = {"item_id": item["id"], "output_index": index}
        if kind == "text":
            status, _ = status_of(self._choice.get("finish_reason"))
            done = message_item(text, "incomplete" if status == "incomplete" else "completed", item["id"])
            out = (self._event("response.output_text.done", {**where, "content_index": 0, "text": text,
                                                             "logprobs": []})
                   + self._event("response.content_part.done", {**where, "content_index": 0,
                                                                "part": done["content"][0]}))
        elif kind == "reasoning":
            done = reasoning_item(text, item["id"])
            out = (self._event("response.reasoning_text.done", {**where, "content_index": 0, "text": text})
                   + self._event("response.content_part.done", {**where, "content_index": 0,
                                                                "part": done["content"][0]}))
        else:
            done = function_call_item(item["call_id"], item["name"], text, item["id"])
            out = self._event("response.function_call_arguments.done", {**where, "arguments": text})
        self._output.append(done)
        return out + self._event("response.output_item.done", {"output_index": index, "item": done})

    def _failed(self, error: Any) -> bytes:
        error = error if isinstance(error, dict) else {}
        return self.fail(str(error.get("message") or "The engine failed"), str(error.get("code") or "server_error"))

    def _open_reasoning(self) -> bytes:
        return self._open("reasoning", {"id": new_id("rs"), "type": "reasoning", "summary": [], "content": []})

    def _open_text(self) -> bytes:
        return self._open("text", {"id": new_id("msg"), "type": "message", "role": "assistant",
                                   "status": "in_progress", "content": []})

    def _open_tool(self, call_id: str | None, name: str) -> bytes:
        self._tool_id = call_id or new_id("call")
        return self._open("tool", {"id": new_id("fc"), "type": "function_call", "call_id": self._tool_id,
                                   "name": name, "arguments": "", "status": "in_progress"})

    def _usage_object(self) -> dict[str, Any]:
        usage, prompt, completion, cached = self._counted_usage()
        return usage_of(prompt, completion, cached, reasoning_tokens(usage))

    def finish(self) -> bytes:
        """The open item's done events and `response.completed` with the usage (its response's status
        `incomplete` when cut); nothing after a failure. `response` holds the final object afterwards."""
        if self.response is not None:
            return b""
        out = self._close()
        status, incomplete = status_of(self._choice.get("finish_reason"))
        self.response = self._snapshot(status, usage=self._usage_object(), incomplete=incomplete)
        return out + self._last_event("response.completed")

    def fail(self, message: str, code: str = "server_error") -> bytes:
        """`response.failed` for a stream that broke after it started (the open item is left as it was)."""
        self.response = self._snapshot("failed", self._with_partial(),
                                       usage=self._usage_object() if self._usage else None,
                                       error={"code": code, "message": message})
        return self._last_event("response.failed")

    def _last_event(self, name: str) -> bytes:
        """The final event, `type` last: a stream's last bytes say how it ended (bench/_loadgen.py
        checks them), whatever the size of the response before it."""
        data = {"sequence_number": self._sequence, "response": self.response, "type": name}
        self._sequence += 1
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

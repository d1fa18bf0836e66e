"""A chat answer between its two shapes: a stream's chunks assembled into the completion the cache
stores (`Assembler`), and a stored completion sent again as chunks (`replay_chunks`), so an entry
stored from a blocking call answers a streamed one and the other way round, in every dialect.
"""

from __future__ import annotations

from typing import Any

import orjson

_TEXTS = ("content", "reasoning_content", "reasoning", "refusal")


class _Choice:
    __slots__ = ("index", "role", "texts", "tools", "finish_reason")

    def __init__(self, index: int) -> None:
        self.index = index
        self.role = "assistant"
        self.texts: dict[str, list[str]] = {}
        self.tools: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None

    def feed(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("role"), str):
            self.role = delta["role"]
        for name in _TEXTS:
            text = delta.get(name)
            if isinstance(text, str) and text:
                self.texts.setdefault(name, []).append(text)
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            held = self.tools.setdefault(int(call.get("index") or 0), {"function": {"name": "", "arguments": ""}})
            for name in ("id", "type"):
                if call.get(name):
                    held[name] = call[name]
            function = call.get("function")
            if isinstance(function, dict):
                if function.get("name"):
                    held["function"]["name"] += function["name"]
                if function.get("arguments"):
                    held["function"]["arguments"] += function["arguments"]

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role, "content": "".join(self.texts.get("content", ()))}
        for name in _TEXTS[1:]:
            if name in self.texts:
                message[name] = "".join(self.texts[name])
        if self.tools:
            message["tool_calls"] = [{"id": call.get("id"), "type": call.get("type", "function"),
                                      "function": call["function"]} for _, call in sorted(self.tools.items())]
        return message


class Assembler:
    """A stream's chunks, folded into one `chat.completion` as they pass."""

    __slots__ = ("_head", "_choices", "_usage", "failed")

    def __init__(self) -> None:
        self._head: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}
        self._usage: dict[str, Any] | None = None
        self.failed = False  # an error chunk came: nothing to store

    def feed(self, data: bytes) -> None:
        """One chunk's JSON."""
        chunk = orjson.loads(data)
        if not isinstance(chunk, dict) or "error" in chunk:
            self.failed = True
            return
        if self._head is None:
            self._head = {"id": chunk.get("id"), "created": chunk.get("created"), "model": chunk.get("model"),
                          "system_fingerprint": chunk.get("system_fingerprint")}
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            index = int(choice.get("index") or 0)
            held = self._choices.get(index)
            if held is None:
                held = self._choices[index] = _Choice(index)
            if isinstance(choice.get("delta"), dict):
                held.feed(choice["delta"])
            if choice.get("finish_reason"):
                held.finish_reason = choice["finish_reason"]

    def feed_sse(self, frames: bytes) -> None:
        """SSE frames (`data: ...` events; `[DONE]` passes)."""
        for event in frames.split(b"\n\n"):
            if event.startswith(b"data: ") and event != b"data: [DONE]":
                self.feed(event[6:])

    def completion(self) -> dict[str, Any] | None:
        """The completion the chunks make; None when it is not one to store: a failure, a choice
        without a finish (a cut stream), or a refusal (`content_filter`)."""
        if self.failed or self._head is None or not self._choices:
            return None
        choices = []
        for index, choice in sorted(self._choices.items()):
            if choice.finish_reason is None or choice.finish_reason == "content_filter":
                return None
            choices.append({"index": index, "message": choice.message(), "finish_reason": choice.finish_reason})
        reply = {"id": self._head["id"], "object": "chat.completion", "created": self._head["created"],
                 "model": self._head["model"], "choices": choices}
        if self._head.get("system_fingerprint"):
            reply["system_fingerprint"] = self._head["system_fingerprint"]
        if self._usage is not None:
            reply["usage"] = self._usage
        return reply


def complete_reply(reply: dict[str, Any]) -> bool:
    """Whether a blocking completion may be stored: every choice finished, none refused."""
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    return all(isinstance(c, dict) and c.get("finish_reason") and c.get("finish_reason") != "content_filter"
               for c in choices)


def replay_chunks(reply: dict[str, Any]) -> list[bytes]:
    """A stored completion as the chunks of a stream: per choice, one delta with the whole message
    and one with its finish; then the usage chunk (`choices` empty), as every stream ends."""
    head = {"id": reply.get("id"), "object": "chat.completion.chunk", "created": reply.get("created"),
            "model": reply.get("model")}
    if reply.get("system_fingerprint"):
        head["system_fingerprint"] = reply["system_fingerprint"]
    chunks = []
    for choice in reply.get("choices") or ():
        message = dict(choice.get("message") or {})
        delta: dict[str, Any] = {"role": message.pop("role", "assistant")}
        delta["content"] = message.pop("content", None) or ""
        for name in _TEXTS[1:]:
            if message.get(name) is not None:
                delta[name] = message[name]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        index = choice.get("index", 0)
        chunks.append(orjson.dumps({**head, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}))
        chunks.append(orjson.dumps({**head, "choices": [{"index": index, "delta": {},
                                                         "finish_reason": choice.get("finish_reason")}]}))
    chunks.append(orjson.dumps({**head, "choices": [], "usage": reply.get("usage")}))
    return chunks

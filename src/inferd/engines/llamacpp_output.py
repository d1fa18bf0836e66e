"""What in-process chat models say, turned into the OpenAI shape: `<tool_call>{…}</tool_call>`
blocks (the Qwen/Hermes convention) into `tool_calls`, whole or streamed; and response formats
into grammars that make the output parse.

Small models often answer a tools request with the call as a bare or fenced JSON object
(```json {"name": …, "arguments": …} ```) instead of the tagged block. A whole reply of that
shape that names one of the request's tools is taken as the call, too."""

from __future__ import annotations

import json
import re
import uuid
from functools import lru_cache
from typing import Any

from inferd.errors import InvalidRequest

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCED = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _call(raw: str) -> dict[str, Any] | None:
    """One OpenAI tool call from a block's JSON, or None when it is not a call."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
        return None
    arguments = parsed.get("arguments", parsed.get("parameters", {}))
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": parsed["name"],
                         "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}


def _untagged_call(text: str, tool_names: frozenset[str]) -> dict[str, Any] | None:
    """The call in a reply that is nothing but a (fenced) JSON object naming a declared tool."""
    body = text.strip()
    fenced = _FENCED.match(body)
    if fenced:
        body = fenced.group(1)
    if not (body.startswith("{") and body.endswith("}")):
        return None
    call = _call(body)
    return call if call is not None and call["function"]["name"] in tool_names else None


def split_tool_calls(text: str, tool_names: frozenset[str] = frozenset()) -> tuple[str | None, list[dict[str, Any]]]:
    """(content outside the blocks or None, the calls) from a whole reply."""
    calls = [c for c in (_call(m.group(1)) for m in _BLOCK.finditer(text)) if c]
    if not calls:
        untagged = _untagged_call(text, tool_names)
        return (None, [untagged]) if untagged else (text, [])
    content = _BLOCK.sub("", text).strip()
    return content or None, calls


class ToolCallParser:
    """Streams content deltas, holding back anything that may be the start of a tool call, and
    turns each complete block into a tool_calls delta (indexed as the OpenAI stream has them)."""

    def __init__(self, enabled: bool, tool_names: frozenset[str] = frozenset()) -> None:
        self._enabled = enabled
        self._tool_names = tool_names
        self._buffer = ""
        self._opening = True  # nothing emitted yet: the reply may still be an untagged call
        self._hold = False  # the reply opened like a JSON object: keep it whole until the end
        self.calls = 0

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Deltas for the next piece of generated text."""
        if not self._enabled:
            return [{"content": text}]
        self._buffer += text
        if self._opening:
            start = self._buffer.lstrip()
            if not start or (start[0] == "`" and len(start) < 3):
                return []
            self._opening = False
            self._hold = start.startswith(("{", "```"))
        if self._hold:
            return []
        deltas: list[dict[str, Any]] = []
        while True:
            start = self._buffer.find(OPEN)
            if start < 0:
                # Emit all but a tail that could still grow into "<tool_call>".
                keep = next((n for n in range(min(len(OPEN) - 1, len(self._buffer)), 0, -1)
                             if OPEN.startswith(self._buffer[-n:])), 0)
                emit, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
                if emit:
                    deltas.append({"content": emit})
                return deltas
            if start:
                deltas.append({"content": self._buffer[:start]})
                self._buffer = self._buffer[start:]
            end = self._buffer.find(CLOSE)
            if end < 0:
                return deltas  # inside a block: wait for its end
            block = self._buffer[len(OPEN):end]
            self._buffer = self._buffer[end + len(CLOSE):].lstrip("\n")
            call = _call(block.strip())
            if call is None:
                deltas.append({"content": OPEN + block + CLOSE})
                continue
            deltas.append({"tool_calls": [{"index": self.calls, **call}]})
            self.calls += 1

    def flush(self) -> list[dict[str, Any]]:
        """Whatever is still held back when generation ends."""
        if self._hold:
            self._hold = False
            untagged = _untagged_call(self._buffer, self._tool_names)
            if untagged is not None:
                self._buffer = ""
                self.calls += 1
                return [{"tool_calls": [{"index": 0, **untagged}]}]
            deltas = self.feed("")  # an ordinary reply after all: it may still hold tagged calls
            return deltas + self.flush()
        rest, self._buffer = self._buffer, ""
        return [{"content": rest}] if rest.strip() or (rest and not self.calls) else []


# Called from the engine's prompt threads. lru_cache is thread-safe (two threads may at worst both
# compile a new schema), and a LlamaGrammar holds only its GBNF text: every completion builds its
# own sampler from it, so one cached grammar serves concurrent generations.
@lru_cache(maxsize=64)
def _grammar(kind: str, schema: str) -> Any:
    from llama_cpp import LlamaGrammar
    from llama_cpp.llama_grammar import JSON_GBNF

    if kind == "json_object":
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    return LlamaGrammar.from_json_schema(schema, verbose=False)


def grammar_for(response_format: Any) -> Any:
    """A grammar forcing `response_format` (json_object or json_schema), or None for text."""
    if not isinstance(response_format, dict) or response_format.get("type") in (None, "text"):
        return None
    kind = response_format["type"]
    if kind == "json_object":
        return _grammar("json_object", "")
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise InvalidRequest("response_format.json_schema.schema: required JSON Schema object",
                                 param="response_format")
        try:
            return _grammar("json_schema", json.dumps(schema, sort_keys=True))
        except Exception as exc:  # the converter raises plain exceptions on schemas it cannot express
            raise InvalidRequest(f"response_format.json_schema.schema: not supported: {exc}",
                                 param="response_format") from None
    raise InvalidRequest("response_format.type: must be text, json_object or json_schema", param="response_format")

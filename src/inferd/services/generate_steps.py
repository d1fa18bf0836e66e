"""The pieces a generate turn is built of: its SSE frames, the stored branch as chat messages, and
what one streamed model step produced (services/generate.py runs the turn)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

WORKSPACE = "conversations"  # the usage rows' workspace of every model call a turn makes


def sse(payload: dict[str, Any]) -> bytes:
    """One SSE frame of the generate stream."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def history_messages(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored rows (oldest first) as chat messages; the assistant's tool calls go back upstream."""
    while rows and rows[0]["role"] != "user":
        rows = rows[1:]  # a window that starts mid-turn would pair tool results with no call
    messages: list[dict[str, Any]] = []
    calls: set[str] = set()
    for row in rows:
        if row["role"] == "tool":
            # A retrieval row answers no call of the model's: its passages served that turn only.
            if row["tool_call_id"] in calls:
                messages.append({"role": "tool", "tool_call_id": row["tool_call_id"], "content": row["message"]})
        elif row["role"] == "assistant" and row["tool_calls"]:
            tool_calls = orjson.loads(row["tool_calls"])
            calls.update(str(call.get("id")) for call in tool_calls if isinstance(call, dict))
            messages.append({"role": "assistant", "content": row["message"] or None, "tool_calls": tool_calls})
        else:
            messages.append({"role": row["role"], "content": row["message"]})
    return messages


@dataclass
class StepOutput:
    """What one streamed model step produced."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None

    def add_tool_delta(self, delta: dict[str, Any]) -> None:
        """Merge a streamed tool-call fragment (id and name once, arguments in pieces)."""
        index = int(delta.get("index") or 0)
        call = self.tool_calls.setdefault(index, {"id": "", "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
        if delta.get("id"):
            call["id"] = delta["id"]
        function = delta.get("function") or {}
        if function.get("name"):
            call["function"]["name"] = function["name"]
        if function.get("arguments"):
            call["function"]["arguments"] += function["arguments"]

    def calls(self) -> list[dict[str, Any]]:
        """The complete tool calls, in index order (ids made up where the engine gave none)."""
        calls = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        for call in calls:
            call["id"] = call["id"] or f"call_{uuid.uuid4().hex[:12]}"
        return [c for c in calls if c["function"]["name"]]

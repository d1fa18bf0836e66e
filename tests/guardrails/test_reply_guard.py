"""A streamed reply's tool calls through the output guardrails (services/chat_stream.py): each
call's arguments redacted as they come, cut anywhere; what was held of the answer goes out when the
first call begins, and what was held of a call's arguments when the next call begins, so each
block reaches a client whole and in order; a block stops the reply."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from inferd.services.chat_stream import ReplyGuard, StreamRelay, _put_rests
from tests.guardrails.test_policy import policy_of

EMAIL = "jane.doe+news@example.org"
CARD = "4111 1111 1111 1111"


def run_deltas(guard: ReplyGuard, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The deltas as the relay sends them (the last one's rest added, as the finish chunk's)."""
    async def go() -> list[dict[str, Any]]:
        out = []
        for delta in deltas:
            delta = json.loads(json.dumps(delta))
            if isinstance(delta.get("content"), str):
                delta["content"] = guard.feed("content", delta["content"])
            if delta.get("tool_calls"):
                await StreamRelay._guard_tools(delta, guard)
            out.append(delta)
        last: dict[str, Any] = {}
        _put_rests(last, await guard.flush())
        out.append(last)
        return out

    return asyncio.run(go())


def arguments_by_index(deltas: list[dict[str, Any]]) -> tuple[dict[int, str], list[int]]:
    """Each call's arguments joined, and the order in which the indexes appear."""
    joined: dict[int, str] = {}
    order: list[int] = []
    for delta in deltas:
        for call in delta.get("tool_calls") or ():
            index = call["index"]
            if not order or order[-1] != index:
                order.append(index)
            joined[index] = joined.get(index, "") + (call.get("function") or {}).get("arguments", "")
    return joined, order


def tool_deltas(index: int, arguments: str, pieces: int) -> list[dict[str, Any]]:
    size = -(-len(arguments) // pieces)
    first = {"tool_calls": [{"index": index, "id": f"call_{index}", "type": "function",
                             "function": {"name": "lookup", "arguments": ""}}]}
    return [first] + [{"tool_calls": [{"index": index, "function": {"arguments": arguments[i:i + size]}}]}
                      for i in range(0, len(arguments), size)]


def test_parallel_tool_calls_are_redacted_and_each_comes_out_whole_in_order() -> None:
    policy, counted = policy_of({"name": "mask", "kind": "pii", "action": "redact", "direction": "output",
                                 "entities": ["email", "credit_card"]})
    guard = ReplyGuard(policy, "fast", "acme")
    first = json.dumps({"email": EMAIL, "note": "x" * 10})
    second = json.dumps({"card": CARD})
    deltas = [{"content": f"Looking {EMAIL[:9]}"}, {"content": EMAIL[9:] + " up."}] \
        + tool_deltas(0, first, 10) + tool_deltas(1, second, 3)
    out = run_deltas(guard, deltas)
    text = "".join(d.get("content") or "" for d in out)
    assert text == "Looking [EMAIL] up."
    # The answer's held-back tail went out before the first call opened.
    opened = next(i for i, d in enumerate(out) if d.get("tool_calls"))
    assert "".join(d.get("content") or "" for d in out[:opened + 1]) == text
    joined, order = arguments_by_index(out)
    assert json.loads(joined[0]) == {"email": "[EMAIL]", "note": "x" * 10}
    assert json.loads(joined[1]) == {"card": "[CREDIT_CARD]"}
    assert order == [0, 1]  # call 0 complete before call 1 begins: no block is reopened
    assert not any(v in json.dumps(out) for v in (EMAIL, CARD, "4111"))
    assert ("mask", "output", "redact") in counted and guard.blocked_by is None


def test_a_blocked_tool_call_stops_the_reply() -> None:
    policy, _ = policy_of({"name": "no-cards", "kind": "pii", "action": "block", "direction": "output",
                           "entities": ["credit_card"]})
    guard = ReplyGuard(policy, "fast", "acme")
    out = run_deltas(guard, tool_deltas(0, json.dumps({"card": CARD, "more": "y" * 60}), 8))
    assert guard.blocked_by == "no-cards"
    assert "4111" not in json.dumps(out) and "1111" not in json.dumps(out)


def test_text_after_the_tool_calls_is_still_guarded() -> None:
    policy, _ = policy_of({"name": "mask", "kind": "pii", "action": "redact", "direction": "output",
                           "entities": ["email"]})
    guard = ReplyGuard(policy, "fast", "acme")
    out = run_deltas(guard, tool_deltas(0, json.dumps({"q": "a"}), 2) + [{"content": f"then {EMAIL[:5]}"},
                                                                          {"content": EMAIL[5:]}])
    assert "".join(d.get("content") or "" for d in out) == "then [EMAIL]"

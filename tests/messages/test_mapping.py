"""The translation between Anthropic's Messages API and chat completions, on recorded examples of
each side (tests/messages/data/): requests as the anthropic SDK sends them, replies and streams as
vLLM and the built-in llama.cpp engine give them. No server: the mapping is pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from inferd.errors import (AuthenticationFailed, BudgetExceeded, EngineError, EngineTimeout, InvalidRequest,
                           ModelOverloaded, NotFound, PayloadTooLarge, PermissionDenied, RateLimited, RelayedError)
from inferd.dialects.messages_mapping import error_envelope, from_chat, stop_of, to_chat, tool_input, usage_of
from inferd.dialects.messages_stream import MessageStream

DATA = Path(__file__).parent / "data"


def recorded(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / f"{name}.json").read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", ["request_full", "request_plain"])
def test_requests_become_chat_bodies(name: str) -> None:
    example = recorded(name)
    assert to_chat(example["anthropic"]) == example["chat"]


def test_count_tokens_translates_only_the_prompt() -> None:
    example = recorded("request_full")
    chat = example["chat"]
    counted = to_chat({**example["anthropic"], "max_tokens": None, "stop_sequences": 3}, counting=True)
    assert counted == {name: chat[name] for name in ("model", "messages", "tools", "tool_choice",
                                                     "parallel_tool_calls", "reasoning_effort")}


@pytest.mark.parametrize("name", ["reply_vllm_tool_call", "reply_vllm_stop_sequence", "reply_llamacpp_length"])
def test_completions_become_messages(name: str) -> None:
    example = recorded(name)
    numbers = example["usage"]
    message = from_chat(example["chat"], usage_of(numbers["prompt_tokens"], numbers["completion_tokens"],
                                                  numbers["cached_prompt_tokens"]), thinking=example["thinking"])
    assert message.pop("id").startswith("msg_")
    assert message == example["anthropic"]


def _events(raw: bytes) -> list[list[Any]]:
    events = []
    for frame in raw.decode().split("\n\n"):
        if frame:
            name, data = frame.split("\n")
            assert name.startswith("event: ") and data.startswith("data: ")
            parsed = orjson.loads(data.removeprefix("data: "))
            assert parsed["type"] == name.removeprefix("event: ")
            if parsed["type"] == "message_start":
                assert parsed["message"]["id"].startswith("msg_")
                parsed["message"]["id"] = "msg_X"
            events.append([name.removeprefix("event: "), parsed])
    return events


@pytest.mark.parametrize("name", ["stream_vllm_tools", "stream_broken"])
def test_streams_become_events(name: str) -> None:
    example = recorded(name)
    stream = MessageStream(example["thinking"], lambda model: bool(example["prefix_cache"]))
    first, *rest = example["chunks"]
    raw = stream.start(first, None) + b"".join(stream.feed(chunk) for chunk in rest) + stream.finish()
    assert _events(raw) == example["events"]


def test_stream_hides_reasoning_unless_thinking_and_drops_uncounted_cache_hits() -> None:
    chunks = recorded("stream_vllm_tools")["chunks"]
    stream = MessageStream(False, lambda model: False)
    raw = stream.start(chunks[0], 300) + b"".join(stream.feed(chunk) for chunk in chunks[1:]) + stream.finish()
    events = _events(raw)
    assert events[0][1]["message"]["usage"] == {"input_tokens": 300, "output_tokens": 0}
    assert all(e[1].get("content_block", {}).get("type") != "thinking" for e in events)
    assert events[-2][1]["usage"] == {"input_tokens": 300, "output_tokens": 40, "cache_read_input_tokens": 0,
                                      "cache_creation_input_tokens": 0}


@pytest.mark.parametrize("body, where", [
    ({}, "model"),
    ({"model": "m" * 257}, "model"),
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": "hi"}, "messages"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": True, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user"}]}, "messages[0].content"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "x"}]}]},
     "messages[0].content[0].type"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use"}]}]},
     "messages[0].content[0].type"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "n", "input": "{}"}]}]}, "messages[0].content[0].input"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}]}]},
     "messages[0].content[0].content[0].type"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "data": "xx"}}]}]}, "messages[0].content[0].source.media_type"),
    ({"model": "m", "max_tokens": 5, "system": [{"type": "image"}], "messages": [{"role": "user", "content": "x"}]},
     "system[0].type"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "x"},
      "tools": [{"name": "t", "input_schema": {}}]}, "tool_choice"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "on"}},
     "thinking"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
     "temperature"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "top_k": 1.5}, "top_k"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "metadata": {"user_id": 7}},
     "metadata"),
])
def test_invalid_requests_name_the_field(body: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        to_chat(body)
    assert caught.value.message.startswith(where + ":") and caught.value.status == 400


@pytest.mark.parametrize("budget, effort", [(1024, "low"), (4095, "low"), (4096, "medium"), (16384, "high")])
def test_thinking_budget_sets_the_effort(budget: int, effort: str) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
            "thinking": {"type": "enabled", "budget_tokens": budget}}
    assert to_chat(body)["reasoning_effort"] == effort


def test_stop_reasons() -> None:
    assert stop_of({"finish_reason": "stop"}, False) == ("end_turn", None)
    assert stop_of({"finish_reason": "stop", "stop_reason": 151645}, False) == ("end_turn", None)  # a token id
    assert stop_of({"finish_reason": "stop"}, True) == ("tool_use", None)
    assert stop_of({"finish_reason": "content_filter"}, False) == ("refusal", None)
    assert stop_of({}, False) == ("end_turn", None)


def test_tool_input_keeps_what_a_model_wrote() -> None:
    assert tool_input('{"a": 1}') == {"a": 1} and tool_input("") == {} and tool_input(None) == {}
    assert tool_input('{"a": ') == {"arguments": '{"a": '} and tool_input("[1]") == {"arguments": [1]}


@pytest.mark.parametrize("error, status, kind", [
    (InvalidRequest("x: bad"), 400, "invalid_request_error"),
    (AuthenticationFailed("no"), 401, "authentication_error"),
    (BudgetExceeded("spent"), 402, "billing_error"),
    (PermissionDenied("no"), 403, "permission_error"),
    (NotFound("none"), 404, "not_found_error"),
    (PayloadTooLarge("big"), 413, "request_too_large"),
    (RateLimited(3), 429, "rate_limit_error"),
    (EngineError("failed"), 502, "api_error"),
    (EngineTimeout("slow"), 504, "api_error"),
    (ModelOverloaded(0.3), 503, "overloaded_error"),
])
def test_errors_in_anthropic_envelope(error: Any, status: int, kind: str) -> None:
    assert error.status == status
    assert error_envelope(error) == {"type": "error", "error": {"type": kind, "message": error.message}}


def test_relayed_engine_errors_keep_the_engine_message() -> None:
    vllm = RelayedError(400, b'{"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}')
    assert error_envelope(vllm)["error"] == {"type": "invalid_request_error", "message": "too long"}
    openai = RelayedError(422, b'{"error": {"message": "bad field", "type": "invalid_request_error"}}')
    assert error_envelope(openai)["error"] == {"type": "invalid_request_error", "message": "bad field"}
    text = RelayedError(400, b"plain words", "text/plain")
    assert error_envelope(text)["error"]["message"] == "plain words"

"""The translation between OpenAI's Responses API and chat completions, on recorded examples of
each side (tests/responses/data/): requests as the openai SDK sends them, replies and streams as
vLLM and the built-in llama.cpp engine give them. No server: the mapping is pure."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from inferd.errors import InvalidRequest
from inferd.dialects.responses_items import output_as_input
from inferd.dialects.responses_mapping import continue_from, from_chat, reasoning_tokens, to_chat, usage_of
from inferd.dialects.responses_stream import ResponseStream

DATA = Path(__file__).parent / "data"
IDS = re.compile(r"^(resp|msg|fc|rs)_[0-9a-f]{32}$")


def recorded(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / f"{name}.json").read_text(encoding="utf-8")))


def anonymous(value: Any) -> Any:
    """`value` with every generated id as `<prefix>_X`, after checking its form."""
    if isinstance(value, dict):
        return {key: anonymous(item) for key, item in value.items()}
    if isinstance(value, list):
        return [anonymous(item) for item in value]
    if isinstance(value, str) and IDS.match(value):
        return value.split("_")[0] + "_X"
    return value


@pytest.mark.parametrize("name", ["request_full", "request_plain"])
def test_requests_become_chat_bodies(name: str) -> None:
    example = recorded(name)
    translated = to_chat(example["responses"])
    assert translated.chat == example["chat"]
    assert translated.input_items == example["input_items"]


def test_request_fields_the_response_repeats() -> None:
    translated = to_chat(recorded("request_full")["responses"])
    assert translated.metadata == {"team": "weather"} and translated.store is True
    echo = translated.echo
    assert echo["max_output_tokens"] == 512 and echo["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert echo["reasoning"] == {"effort": "medium", "summary": None} and echo["parallel_tool_calls"] is False
    assert to_chat({"model": "m", "input": "hi", "store": False}).store is False


@pytest.mark.parametrize("name", ["reply_vllm_tool_call", "reply_llamacpp_length"])
def test_completions_become_responses(name: str) -> None:
    example = recorded(name)
    numbers = example["usage"]
    usage = usage_of(numbers["prompt_tokens"], numbers["completion_tokens"], numbers["cached_prompt_tokens"],
                     reasoning_tokens(example["chat"].get("usage")))
    response = from_chat(example["chat"], usage, to_chat(example["request"]))
    assert anonymous(response) == example["response"]


def _events(raw: bytes) -> list[dict[str, Any]]:
    events = []
    for frame in raw.decode().split("\n\n"):
        if frame:
            name, data = frame.split("\n")
            parsed = orjson.loads(data.removeprefix("data: "))
            assert name == "event: " + parsed["type"]
            events.append(anonymous(parsed))
    return events


@pytest.mark.parametrize("name", ["stream_vllm_tools", "stream_broken"])
def test_streams_become_typed_events(name: str) -> None:
    example = recorded(name)
    stream = ResponseStream(to_chat(example["request"]), lambda model: bool(example["prefix_cache"]))
    first, *rest = example["chunks"]
    raw = stream.start(first) + b"".join(stream.feed(chunk) for chunk in rest) + stream.finish()
    events = _events(raw)
    assert events == example["events"]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert stream.response is not None and anonymous(stream.response) == events[-1]["response"]


def test_stream_batches_give_the_same_events() -> None:
    example = recorded("stream_vllm_tools")
    stream = ResponseStream(to_chat(example["request"]), lambda model: True)
    first, *rest = example["chunks"]
    raw = stream.start(first) + stream.feed_all([orjson.dumps(chunk) for chunk in rest]) + stream.finish()
    assert _events(raw) == example["events"]


def test_cached_tokens_only_from_models_that_report_them() -> None:
    example = recorded("stream_vllm_tools")
    stream = ResponseStream(to_chat(example["request"]), lambda model: False)
    for chunk in example["chunks"]:
        stream.feed(chunk)
    stream.finish()
    assert stream.response is not None and stream.response["usage"]["input_tokens_details"] == {"cached_tokens": 0}


def test_previous_output_continues_as_input() -> None:
    response = recorded("reply_vllm_tool_call")["response"]
    history = [{"type": "message", "role": "user", "content": "Weather in Paris, and the time?"},
               *output_as_input(response["output"])]
    translated = to_chat({"model": "m", "instructions": "Be brief.", "input": [
        {"type": "function_call_output", "call_id": "chatcmpl-tool-5c3a0a9b2f7e4d1b", "output": "15 C"},
        {"type": "function_call_output", "call_id": "chatcmpl-tool-8d2e1f0a3b4c5d6e", "output": "noon"}]})
    continue_from(translated, history)
    assert translated.chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris, and the time?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "chatcmpl-tool-5c3a0a9b2f7e4d1b", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "chatcmpl-tool-8d2e1f0a3b4c5d6e", "type": "function",
             "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "chatcmpl-tool-5c3a0a9b2f7e4d1b", "content": "15 C"},
        {"role": "tool", "tool_call_id": "chatcmpl-tool-8d2e1f0a3b4c5d6e", "content": "noon"}]


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "hi"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].content[0].type"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
     "input[0].content[0].image_url"),
    ({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"model": "m", "input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"model": "m", "input": "hi", "tool_choice": "sometimes"}, "tool_choice"),
    ({"model": "m", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"model": "m", "input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"model": "m", "input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"model": "m", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "hi", "temperature": "hot"}, "temperature"),
    ({"model": "m", "input": "hi", "stream": "yes"}, "stream"),
    ({"model": "m", "input": "hi", "store": 1}, "store"),
    ({"model": "m", "input": "hi", "metadata": {"k": 1}}, "metadata.k"),
    ({"model": "m", "input": "hi", "previous_response_id": 7}, "previous_response_id"),
    ({"model": "m", "input": "hi", "instructions": ["x"]}, "instructions"),
])
def test_invalid_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        to_chat(body)
    assert caught.value.param == param and caught.value.message.startswith(param)

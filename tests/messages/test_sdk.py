"""The official anthropic SDK against the running server and the fake upstream: plain, streamed,
tools with tool_use / tool_result round trips, thinking, stop sequences and count_tokens."""

from __future__ import annotations

import anthropic
import pytest

from tests.fakes.upstream import REPLY_WORDS
from tests.harness import Server, Upstream

HELLO = [{"role": "user", "content": "Say hello"}]
SEARCH = [{"name": "search", "description": "Search the documents",
           "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
          {"name": "clock", "description": "The time now", "input_schema": {"type": "object", "properties": {}}}]


def test_plain_message(claude: anthropic.Anthropic, msg_server: Server, msg_key: str) -> None:
    message = claude.messages.create(model="mock-chat", max_tokens=100, messages=HELLO,
                                     system="You are terse.", metadata={"user_id": "user-7"})
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.model == "mock-chat"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == " ".join(REPLY_WORDS)  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    rows = msg_server.usage_rows(msg_key)
    assert len(rows) == 1
    row = rows[0]
    assert row["workspace"] == "chat" and row["status_code"] == 200 and row["metadata"] is None
    usage = message.usage
    assert usage.output_tokens == row["completion_tokens"] == len(REPLY_WORDS)
    # Anthropic's input_tokens leaves out what the prefix cache served; together they are the prompt.
    assert usage.cache_read_input_tokens == row["cached_prompt_tokens"] > 0
    assert usage.input_tokens + usage.cache_read_input_tokens == row["prompt_tokens"]


def test_max_tokens_stops_with_max_tokens(claude: anthropic.Anthropic, upstream: Upstream) -> None:
    # This SDK release takes the sampling settings only as extra body fields.
    message = claude.messages.create(model="mock-chat", max_tokens=3, messages=HELLO,
                                     extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 40})
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3
    sent = upstream.last_chat_body()
    assert sent["max_tokens"] == 3 and sent["temperature"] == 0.2 and sent["top_p"] == 0.9 and sent["top_k"] == 40
    assert "metadata" not in sent


def test_streamed_message(claude: anthropic.Anthropic, msg_server: Server, msg_key: str) -> None:
    with claude.messages.stream(model="mock-chat", max_tokens=100, messages=HELLO) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
        text = stream.get_final_text()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert events.count("content_block_start") == events.count("content_block_stop") == 1
    assert text == " ".join(REPLY_WORDS) and final.stop_reason == "end_turn"
    rows = msg_server.usage_rows(msg_key)
    assert len(rows) == 1 and rows[0]["workspace"] == "chat"
    assert final.usage.output_tokens == rows[0]["completion_tokens"]
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == rows[0]["prompt_tokens"]


def test_raw_stream_event_order(claude: anthropic.Anthropic) -> None:
    kinds = []
    for event in claude.messages.create(model="mock-chat", max_tokens=100, messages=HELLO, stream=True):
        kinds.append(event.type)
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_and_tool_result_round_trip(claude: anthropic.Anthropic, upstream: Upstream, stream: bool) -> None:
    question = {"role": "user", "content": "where is the manual"}

    def ask(messages: list[dict]) -> anthropic.types.Message:  # type: ignore[type-arg]
        if not stream:
            return claude.messages.create(model="mock-tools", max_tokens=100, tools=SEARCH,  # type: ignore[arg-type]
                                          messages=messages)  # type: ignore[arg-type]
        with claude.messages.stream(model="mock-tools", max_tokens=100, tools=SEARCH,  # type: ignore[arg-type]
                                    messages=messages) as events:  # type: ignore[arg-type]
            return events.get_final_message()

    first = ask([question])
    assert first.stop_reason == "tool_use"
    call = first.content[-1]
    assert call.type == "tool_use" and call.name == "search" and call.input == {"query": "where is the manual"}
    sent = upstream.last_chat_body()
    assert sent["tools"][0] == {"type": "function", "function": {
        "name": "search", "description": "Search the documents", "parameters": SEARCH[0]["input_schema"]}}
    second = ask([question, {"role": "assistant", "content": [block.model_dump() for block in first.content]},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": call.id, "content": "On the top shelf"},
                      {"type": "text", "text": "Thanks"}]}])
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "From the sources: On the top shelf"  # type: ignore[union-attr]
    sent = upstream.last_chat_body()
    assert sent["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": "search", "arguments": '{"query":"where is the manual"}'}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "On the top shelf"},
        {"role": "user", "content": "Thanks"}]


def test_tool_choice_names_the_tool(claude: anthropic.Anthropic, upstream: Upstream) -> None:
    message = claude.messages.create(model="mock-tools", max_tokens=100, tools=SEARCH,  # type: ignore[arg-type]
                                     tool_choice={"type": "tool", "name": "clock", "disable_parallel_tool_use": True},
                                     messages=HELLO)  # type: ignore[arg-type]
    assert message.content[-1].type == "tool_use" and message.content[-1].name == "clock"
    sent = upstream.last_chat_body()
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "clock"}}
    assert sent["parallel_tool_calls"] is False
    none = claude.messages.create(model="mock-tools", max_tokens=100, tools=SEARCH,  # type: ignore[arg-type]
                                  tool_choice={"type": "none"}, messages=HELLO)  # type: ignore[arg-type]
    assert none.stop_reason == "end_turn" and none.content[0].type == "text"
    claude.messages.create(model="mock-tools", max_tokens=100, tools=SEARCH,  # type: ignore[arg-type]
                           tool_choice={"type": "any"}, messages=HELLO)  # type: ignore[arg-type]
    assert upstream.last_chat_body()["tool_choice"] == "required"


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequence(claude: anthropic.Anthropic, stream: bool) -> None:
    kwargs = {"model": "mock-stops", "max_tokens": 100, "messages": HELLO, "stop_sequences": ["answering", "nope"]}
    if stream:
        with claude.messages.stream(**kwargs) as events:  # type: ignore[arg-type]
            message = events.get_final_message()
    else:
        message = claude.messages.create(**kwargs)  # type: ignore[arg-type]
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "answering"
    assert message.content[0].text == "This is the mock upstream"  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_on_and_off(claude: anthropic.Anthropic, upstream: Upstream, stream: bool) -> None:
    def ask(thinking: dict) -> anthropic.types.Message:  # type: ignore[type-arg]
        kwargs = {"model": "mock-reason", "max_tokens": 100, "messages": HELLO, "thinking": thinking}
        if not stream:
            return claude.messages.create(**kwargs)  # type: ignore[arg-type]
        with claude.messages.stream(**kwargs) as events:  # type: ignore[arg-type]
            return events.get_final_message()

    on = ask({"type": "enabled", "budget_tokens": 2048})
    assert upstream.last_chat_body()["reasoning_effort"] == "low"
    assert [block.type for block in on.content] == ["thinking", "text"]
    assert on.content[0].thinking.startswith("thinking")  # type: ignore[union-attr]
    off = ask({"type": "disabled"})
    assert upstream.last_chat_body()["reasoning_effort"] == "off"
    assert [block.type for block in off.content] == ["text"]


def test_image_block_goes_upstream_as_a_data_url(claude: anthropic.Anthropic, upstream: Upstream) -> None:
    claude.messages.create(model="mock-vision", max_tokens=10, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "text", "text": "What is this?"}]}])
    assert upstream.last_chat_body()["messages"] == [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "text", "text": "What is this?"}]}]


@pytest.mark.parametrize("model", ["mock-chat", "mock-tools"])
def test_count_tokens_equals_the_billed_prompt(claude: anthropic.Anthropic, msg_server: Server, msg_key: str,
                                               model: str) -> None:
    request = {"model": model, "system": [{"type": "text", "text": "Be brief."}], "tools": SEARCH,
               "messages": [{"role": "user", "content": "look it up"},
                            {"role": "assistant", "content": [
                                {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"query": "x"}}]},
                            {"role": "user", "content": [
                                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                                    {"type": "text", "text": "three words here"}]}]}]}
    counted = claude.messages.count_tokens(**request)  # type: ignore[arg-type]
    assert msg_server.usage_rows(msg_key) == []  # counting is free
    claude.messages.create(max_tokens=50, **request)  # type: ignore[arg-type]
    rows = msg_server.usage_rows(msg_key)
    assert len(rows) == 1 and counted.input_tokens == rows[0]["prompt_tokens"] > 0

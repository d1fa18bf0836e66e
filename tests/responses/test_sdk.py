"""The official openai SDK's `responses` against the running server and the fake upstream: plain,
streamed, function calls and their outputs, json_schema, reasoning, max_output_tokens."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.fakes.upstream import REPLY_WORDS
from tests.harness import Server, Upstream

REPLY = " ".join(REPLY_WORDS)
SEARCH = [{"type": "function", "name": "search", "description": "Search the documents",
           "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
          {"type": "function", "name": "clock", "description": "The time now",
           "parameters": {"type": "object", "properties": {}}}]


def test_plain_response(client: openai.OpenAI, resp_server: Server, resp_key: str, upstream: Upstream) -> None:
    response = client.responses.create(model="mock-chat", input="Say hello", instructions="You are terse.",
                                       metadata={"team": "search"}, temperature=0.2, user="user-7")
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status == "completed" and response.incomplete_details is None
    assert response.model == "mock-chat" and response.instructions == "You are terse."
    assert response.output_text == REPLY
    [item] = response.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.content[0].type == "output_text" and item.content[0].annotations == []
    sent = upstream.last_chat_body()
    assert sent["messages"] == [{"role": "system", "content": "You are terse."},
                                {"role": "user", "content": "Say hello"}]
    assert sent["temperature"] == 0.2 and sent["user"] == "user-7" and "metadata" not in sent
    [row] = resp_server.usage_rows(resp_key)
    assert row["workspace"] == "chat" and row["status_code"] == 200 and row["model"] == "mock-chat"
    assert row["metadata"] is not None and '"team"' in row["metadata"] and response.metadata == {"team": "search"}
    usage = response.usage
    assert usage is not None
    assert usage.input_tokens == row["prompt_tokens"] and usage.output_tokens == row["completion_tokens"] == 16
    assert usage.input_tokens_details.cached_tokens == row["cached_prompt_tokens"] > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_streamed_response(client: openai.OpenAI, resp_server: Server, resp_key: str) -> None:
    with client.responses.stream(model="mock-chat", input="Say hello") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]  # type: ignore[union-attr]
    assert "".join(deltas) == REPLY
    assert final.output_text == REPLY and final.status == "completed"
    assert events[0].response.id == final.id  # type: ignore[union-attr]
    [row] = resp_server.usage_rows(resp_key)
    assert final.usage is not None and final.usage.output_tokens == row["completion_tokens"]
    assert final.usage.input_tokens == row["prompt_tokens"]
    assert final.usage.input_tokens_details.cached_tokens == row["cached_prompt_tokens"]
    assert client.responses.retrieve(final.id).output_text == REPLY  # stored before the last event


def test_raw_stream_events_carry_item_ids(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="mock-chat", input="Say hello", stream=True))
    added = next(e for e in events if e.type == "response.output_item.added")
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert {(e.item_id, e.output_index, e.content_index) for e in deltas} == {(added.item.id, 0, 0)}
    assert events[-1].type == "response.completed" and events[-1].response.usage is not None


def _ask(client: openai.OpenAI, stream: bool, **request: Any) -> Any:
    if not stream:
        return client.responses.create(**request)
    with client.responses.stream(**request) as events:
        return events.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_and_its_output(client: openai.OpenAI, upstream: Upstream, stream: bool) -> None:
    question = {"role": "user", "content": "where is the manual"}
    first = _ask(client, stream, model="mock-tools", input=[question], tools=SEARCH)
    [call] = first.output
    assert call.type == "function_call" and call.name == "search" and call.status == "completed"
    assert call.arguments == '{"query": "where is the manual"}' and call.call_id and call.id.startswith("fc_")
    assert first.status == "completed"
    second = _ask(client, stream, model="mock-tools", tools=SEARCH, input=[
        question, {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "The manual is on shelf 3."}])
    assert second.output_text == "From the sources: The manual is on shelf 3."
    messages = upstream.last_chat_body()["messages"]
    assert messages[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.call_id, "type": "function", "function": {"name": "search", "arguments": call.arguments}}]}
    assert messages[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "The manual is on shelf 3."}


def test_function_output_after_previous_response_id(client: openai.OpenAI) -> None:
    first = client.responses.create(model="mock-tools", input="where is the manual", tools=SEARCH,
                                    tool_choice={"type": "function", "name": "clock"})
    [call] = first.output
    assert call.type == "function_call" and call.name == "clock"
    second = client.responses.create(model="mock-tools", tools=SEARCH, previous_response_id=first.id, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "noon"}])
    assert second.output_text == "From the sources: noon" and second.previous_response_id == first.id


def test_json_schema_and_json_object(client: openai.OpenAI, upstream: Upstream) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    response = client.responses.create(model="mock-chat", input="A city?", text={"format": {
        "type": "json_schema", "name": "city", "schema": schema, "strict": True}})
    assert response.text is not None and response.text.format.type == "json_schema"
    assert upstream.last_chat_body()["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}}
    client.responses.create(model="mock-chat", input="JSON please", text={"format": {"type": "json_object"}})
    assert upstream.last_chat_body()["response_format"] == {"type": "json_object"}
    client.responses.create(model="mock-chat", input="plain", text={"format": {"type": "text"}})
    assert "response_format" not in upstream.last_chat_body()


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_effort_and_item(client: openai.OpenAI, upstream: Upstream, stream: bool) -> None:
    response = _ask(client, stream, model="mock-reason", input="Think", reasoning={"effort": "minimal"})
    assert upstream.last_chat_body()["reasoning_effort"] == "low"
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"]
    assert response.output[0].content[0].text.startswith("thinking")
    assert response.reasoning.effort == "minimal"


@pytest.mark.parametrize("stream", [False, True])
def test_max_output_tokens_ends_incomplete(client: openai.OpenAI, resp_server: Server, resp_key: str,
                                           upstream: Upstream, stream: bool) -> None:
    if stream:
        events = list(client.responses.create(model="mock-chat", input="Say hello", max_output_tokens=3,
                                              stream=True))
        assert events[-1].type == "response.completed"  # every stream ends so, or failed
        response = events[-1].response  # type: ignore[union-attr]
    else:
        response = client.responses.create(model="mock-chat", input="Say hello", max_output_tokens=3)
    assert upstream.last_chat_body()["max_tokens"] == 3
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete" and response.output_text == " ".join(REPLY_WORDS[:3])
    assert response.usage.output_tokens == 3 and response.max_output_tokens == 3
    assert resp_server.usage_rows(resp_key)[-1]["completion_tokens"] == 3

"""The Messages API on the built-in chat model (Qwen2.5-Coder-0.5B through llama.cpp, in-process):
one plain reply and one tool call, through the official anthropic SDK."""

from __future__ import annotations

from typing import Iterator

import anthropic
import pytest

from tests.harness import Server

WEATHER = [{"name": "get_weather", "description": "Current weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.fixture(scope="module")
def builtin_claude(builtin: Server, builtin_key: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=builtin.base_url, api_key=builtin_key, max_retries=0, timeout=120) as client:
        yield client


def test_plain_reply(builtin_claude: anthropic.Anthropic, builtin: Server, builtin_key: str) -> None:
    message = builtin_claude.messages.create(
        model="fast", max_tokens=20, extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "What is the capital of France? Answer with the city name only."}])
    assert "Paris" in message.content[0].text  # type: ignore[union-attr]
    assert message.model == "qwen2.5-coder-0.5b-instruct" and message.stop_reason == "end_turn"
    counted = builtin_claude.messages.count_tokens(
        model="fast", messages=[{"role": "user", "content": "What is the capital of France? Answer with the city "
                                 "name only."}])
    row = builtin.usage_rows(builtin_key)[-1]
    assert message.usage.input_tokens == counted.input_tokens == row["prompt_tokens"]
    assert message.usage.output_tokens == row["completion_tokens"] > 0


def test_tool_call(builtin_claude: anthropic.Anthropic) -> None:
    message = builtin_claude.messages.create(
        model="qwen2.5-coder-0.5b-instruct", max_tokens=100, tools=WEATHER,  # type: ignore[arg-type]
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "What is the weather in Paris right now?"}])
    assert message.stop_reason == "tool_use"
    call = next(block for block in message.content if block.type == "tool_use")
    assert call.name == "get_weather" and "paris" in str(call.input.get("city", "")).lower()  # type: ignore[union-attr]

"""The Responses API on the built-in chat model (Qwen2.5-Coder-0.5B through llama.cpp, in-process):
one plain reply and one tool call, through the official openai SDK."""

from __future__ import annotations

import json

import openai

from tests.harness import Server

WEATHER = [{"type": "function", "name": "get_weather", "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def test_plain_reply(builtin_sdk: openai.OpenAI, builtin: Server, builtin_key: str) -> None:
    response = builtin_sdk.responses.create(
        model="fast", temperature=0, max_output_tokens=20,
        input="What is the capital of France? Answer with the city name only.")
    assert "Paris" in response.output_text
    assert response.model == "qwen2.5-coder-0.5b-instruct" and response.status == "completed"
    row = builtin.usage_rows(builtin_key)[-1]
    assert response.usage is not None and row["workspace"] == "chat"
    assert response.usage.input_tokens == row["prompt_tokens"] > 0
    assert response.usage.output_tokens == row["completion_tokens"] > 0


def test_tool_call(builtin_sdk: openai.OpenAI) -> None:
    response = builtin_sdk.responses.create(
        model="qwen2.5-coder-0.5b-instruct", tools=WEATHER, temperature=0,  # type: ignore[arg-type]
        input=[{"role": "user", "content": "What is the weather in Paris right now?"}])
    call = next(item for item in response.output if item.type == "function_call")
    assert call.name == "get_weather" and call.call_id  # type: ignore[union-attr]
    assert "paris" in str(json.loads(call.arguments).get("city", "")).lower()  # type: ignore[union-attr]

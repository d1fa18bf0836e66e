"""Tool-call blocks into OpenAI tool_calls, whole and streamed piece by piece."""

from __future__ import annotations

import json

import pytest

from inferd.engines.llamacpp_output import ToolCallParser, grammar_for, split_tool_calls
from inferd.errors import InvalidRequest

REPLY = 'Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_whole_reply() -> None:
    content, calls = split_tool_calls(REPLY)
    assert content == "Let me check."
    assert calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert split_tool_calls("plain <b>text</b>") == ("plain <b>text</b>", [])


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_streamed_in_any_pieces(size: int) -> None:
    parser = ToolCallParser(enabled=True)
    deltas = [d for i in range(0, len(REPLY), size) for d in parser.feed(REPLY[i:i + size])] + parser.flush()
    text = "".join(d.get("content", "") for d in deltas)
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert text == "Let me check. "
    assert len(calls) == 1 and calls[0]["index"] == 0
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}


def test_unparseable_block_stays_content() -> None:
    parser = ToolCallParser(enabled=True)
    deltas = parser.feed("<tool_call>not json</tool_call>") + parser.flush()
    assert "".join(d.get("content", "") for d in deltas) == "<tool_call>not json</tool_call>"
    assert parser.calls == 0


def test_bad_response_format_is_400() -> None:
    with pytest.raises(InvalidRequest):
        grammar_for({"type": "xml"})
    with pytest.raises(InvalidRequest):
        grammar_for({"type": "json_schema", "json_schema": {"name": "x"}})
    assert grammar_for({"type": "text"}) is None and grammar_for(None) is None


FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {"city": "Paris"}\n}\n```'


def test_untagged_call_naming_a_declared_tool() -> None:
    content, calls = split_tool_calls(FENCED, frozenset({"get_weather"}))
    assert content is None and calls[0]["function"]["name"] == "get_weather"
    assert split_tool_calls(FENCED, frozenset({"other"}))[1] == []  # not a declared tool: plain content


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_untagged_call_streamed(size: int) -> None:
    parser = ToolCallParser(enabled=True, tool_names=frozenset({"get_weather"}))
    deltas = [d for i in range(0, len(FENCED), size) for d in parser.feed(FENCED[i:i + size])] + parser.flush()
    assert [d for d in deltas if "content" in d] == []
    assert deltas[0]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_code_that_is_not_a_call_is_content() -> None:
    code = "```python\nprint('hi')\n```"
    parser = ToolCallParser(enabled=True, tool_names=frozenset({"get_weather"}))
    deltas = [d for ch in code for d in parser.feed(ch)] + parser.flush()
    assert "".join(d.get("content", "") for d in deltas) == code

"""A chat answer between its two shapes: chunks assembled into the completion the cache stores, and
a stored completion replayed as chunks that assemble into the same answer; cut, failed and refused
streams give nothing to store. And the `[cache]` table's checks."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from inferd.cache.replay import Assembler, complete_reply, replay_chunks
from inferd.config_cache import CacheConfig, parse_cache
from inferd.errors import ConfigError

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return orjson.dumps({**HEAD, "choices": choices, **extra})


STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "think", "reasoning": "think"}),
    chunk({"content": "Hello"}), chunk({"content": " world"}),
    chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "look", "arguments": '{"q":'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
    chunk({}, "tool_calls"),
    chunk(None, usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}),
]


def assembled(chunks: list[bytes]) -> dict[str, Any] | None:
    assembler = Assembler()
    for data in chunks:
        assembler.feed(data)
    return assembler.completion()


def test_a_stream_assembles_into_its_completion() -> None:
    reply = assembled(STREAM)
    assert reply is not None
    assert reply["object"] == "chat.completion" and reply["id"] == "chatcmpl-1" and reply["model"] == "m"
    message = reply["choices"][0]["message"]
    assert message["content"] == "Hello world" and message["reasoning_content"] == "think"
    assert message["tool_calls"] == [{"id": "call_1", "type": "function",
                                      "function": {"name": "look", "arguments": '{"q":"x"}'}}]
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert reply["usage"]["total_tokens"] == 7
    assert complete_reply(reply)


def test_a_replay_assembles_into_the_same_answer() -> None:
    reply = assembled(STREAM)
    assert reply is not None
    chunks = replay_chunks(reply)
    assert orjson.loads(chunks[-1])["choices"] == [] and orjson.loads(chunks[-1])["usage"] == reply["usage"]
    assert assembled(chunks) == reply
    sse = Assembler()
    sse.feed_sse(b"".join(b"data: " + c + b"\n\n" for c in chunks) + b"data: [DONE]\n\n")
    assert sse.completion() == reply


@pytest.mark.parametrize("chunks", [
    STREAM[:5],  # cut: no finish
    [*STREAM[:4], chunk({}, "content_filter")],  # refused
    [*STREAM[:4], orjson.dumps({"error": {"message": "upstream went away"}})],  # failed
    [],
])
def test_nothing_to_store_from_a_cut_refused_or_failed_stream(chunks: list[bytes]) -> None:
    assert assembled(chunks) is None


def test_a_blocking_reply_is_stored_only_when_complete() -> None:
    assert complete_reply({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]})
    assert not complete_reply({"choices": [{"message": {"content": ""}, "finish_reason": "content_filter"}]})
    assert not complete_reply({"choices": []})


def fail(table: str, key: str | None, problem: str) -> ConfigError:
    return ConfigError(f"{table} {key}: {problem}")


def test_the_cache_table() -> None:
    assert parse_cache(fail, {}) == CacheConfig()
    assert not CacheConfig().enabled and CacheConfig().ttl_s == 3600 and CacheConfig().only_deterministic
    config = parse_cache(fail, {"enabled": True, "ttl_s": 10, "max_entries": 5, "scope": "org",
                                "semantic_threshold": 1})
    assert (config.enabled, config.ttl_s, config.max_entries, config.scope) == (True, 10, 5, "org")
    for bad in ({"enabled": "yes"}, {"ttl_s": 0}, {"ttl_s": 1.5}, {"max_entries": True}, {"scope": "user"},
                {"semantic_threshold": 0}, {"semantic_model": ""}, {"colour": 1}):
        with pytest.raises(ConfigError):
            parse_cache(fail, bad)

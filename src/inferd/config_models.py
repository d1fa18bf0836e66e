"""One `[[models]]` entry of the configuration file, as config.py reads it: `ModelConfig` and its `Cost`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Cost:
    """Prices in USD: per million tokens, and per generated image."""

    input_per_m_token: float = 0.0
    output_per_m_token: float = 0.0
    image_per_generation: float | None = None


@dataclass(frozen=True)
class ModelConfig:
    """One `[[models]]` entry. Engine-specific keys stay in `options` for the engine to read."""

    id: str
    type: str = "chat"
    engine: str = "openai"
    base_url: str | None = None
    upstream_model: str | None = None
    api_key: str | None = None
    context_length: int | None = None
    aliases: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    thinking: str = "none"
    image_urls: str = "any"
    tokenizer: str = "estimate"
    cost: Cost | None = None
    model_full_name: str | None = None
    description: str | None = None
    use_when: str | None = None
    timeout_s: float = 600.0
    model_icon_url: str | None = None
    owned_by: str = "inferd"
    prefix_cache: bool = False
    maintenance: bool = False
    supported_parameters: tuple[str, ...] | None = None
    builtin: bool = False
    deployment: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    # The pool (inferd/config_pools.py).
    deployments: tuple["ModelConfig", ...] = ()
    routing: str = "least-busy"
    fallbacks: tuple[str, ...] = ()
    cooldown_s: float = 5.0
    health_path: str | None = None
    health_interval_s: float = 5.0
    queue_timeout_s: float = 30.0
    weight: float = 1.0
    max_in_flight: int | None = None
    # Requests and tokens per minute of every caller of this model together.
    rpm: int | None = None
    tpm: int | None = None
    # false: never answered from the response cache, nor stored in it.
    cache: bool = True

    @property
    def deployment_name(self) -> str:
        """The name usage rows carry in `deployment`."""
        return self.deployment or self.id

    @property
    def pool(self) -> tuple["ModelConfig", ...]:
        """The model's deployments: its `[[models.deployments]]`, or itself as a pool of one."""
        return self.deployments or (self,)

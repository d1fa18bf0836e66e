"""The model catalogue: ids and aliases to deployments, capabilities, prices, org allow-lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferd.config import ModelConfig
from inferd.engines.base import Engine
from inferd.engines.registry import EngineRegistry
from inferd.errors import InvalidRequest, NotFound, PermissionDenied, ServiceUnavailable
from inferd.store.keys import KeyRecord

CHAT_TYPES = ("chat", "vision-chat")
_CAPABILITY_PARAMETERS = {
    "tools": ("tools", "tool_choice", "parallel_tool_calls"),
    "response_format": ("response_format",),
    "reasoning_effort": ("reasoning_effort",),
}


@dataclass(frozen=True)
class Deployment:
    """One catalogue entry with its engine and its precomputed model object."""

    config: ModelConfig
    engine: Engine
    model_object: dict[str, Any]  # without `created`, which is set per response

    @property
    def id(self) -> str:
        """The canonical model id."""
        return self.config.id

    def require_type(self, allowed: tuple[str, ...], route: str) -> None:
        """400 when the model cannot serve this route."""
        if self.config.type not in allowed:
            raise InvalidRequest(f"Model '{self.config.id}' is a {self.config.type} model and cannot serve {route}",
                                 code="model_type_mismatch", param="model")


def supported_parameters(config: ModelConfig, base_parameters: tuple[str, ...]) -> list[str]:
    """What the catalogue advertises: the engine's parameters plus those capabilities enable."""
    if config.type not in CHAT_TYPES:
        return []
    if config.supported_parameters is not None:
        return list(config.supported_parameters)
    params = list(base_parameters)
    for capability, names in _CAPABILITY_PARAMETERS.items():
        if capability in config.capabilities or (capability == "reasoning_effort" and config.thinking != "none"):
            params.extend(n for n in names if n not in params)
    return params


def model_object(config: ModelConfig, base_parameters: tuple[str, ...]) -> dict[str, Any]:
    """The spec's model object without `created`; optional fields omitted when unset."""
    obj: dict[str, Any] = {"id": config.id, "object": "model", "owned_by": config.owned_by}
    if config.context_length is not None:
        obj["context_length"] = config.context_length
    obj["model_type"] = config.type
    obj["model_full_name"] = config.model_full_name or config.id
    if config.model_icon_url:
        obj["model_icon_url"] = config.model_icon_url
    obj["capabilities"] = {name: True for name in config.capabilities}
    obj["supported_parameters"] = supported_parameters(config, base_parameters)
    obj["aliases"] = list(config.aliases)
    if config.cost is not None:
        cost: dict[str, float] = {"input_per_m_token": config.cost.input_per_m_token,
                                  "output_per_m_token": config.cost.output_per_m_token}
        if config.type == "image-gen" and config.cost.image_per_generation is not None:
            cost["image_per_generation"] = config.cost.image_per_generation
        obj["cost"] = cost
    if config.description:
        obj["description"] = config.description
    if config.use_when:
        obj["use_when"] = config.use_when
    return obj


class ModelCatalogue:
    """Resolves names to deployments and filters by what the caller's org may use."""

    def __init__(self, models: tuple[ModelConfig, ...], registry: EngineRegistry) -> None:
        self._deployments: list[Deployment] = []
        self._by_name: dict[str, Deployment] = {}
        for config in models:
            spec = registry.spec(config.engine)
            deployment = Deployment(config, registry.create(config), model_object(config, spec.base_parameters))
            self._deployments.append(deployment)
            for name in (config.id, *config.aliases):
                self._by_name[name] = deployment

    @property
    def deployments(self) -> list[Deployment]:
        """Every configured deployment."""
        return list(self._deployments)

    @staticmethod
    def allowed(key: KeyRecord, deployment: Deployment) -> bool:
        """Whether the key's org may use the deployment (its allow-list names the id or an alias)."""
        if key.allowed_models is None:
            return True
        names = (deployment.config.id, *deployment.config.aliases)
        return any(name in key.allowed_models for name in names)

    def resolve(self, name: str, key: KeyRecord) -> Deployment:
        """The deployment for a model id or alias: 404 unknown, 403 not allowed, 503 in maintenance."""
        deployment = self._by_name.get(name)
        if deployment is None:
            raise NotFound(f"Model '{name}' does not exist", code="model_not_found", param="model")
        if not self.allowed(key, deployment):
            raise PermissionDenied(f"Model '{name}' is not in your organisation's allowed models",
                                   code="model_not_allowed", param="model")
        if deployment.config.maintenance:
            raise ServiceUnavailable(f"Model '{deployment.id}' is down for maintenance", code="model_maintenance")
        return deployment

    def listing(self, key: KeyRecord) -> list[dict[str, Any]]:
        """Model objects (without `created`) the key's org may use and that are live."""
        return [d.model_object for d in self._deployments
                if not d.config.maintenance and self.allowed(key, d)]

    async def close(self) -> None:
        """Close every engine."""
        for deployment in self._deployments:
            await deployment.engine.close()

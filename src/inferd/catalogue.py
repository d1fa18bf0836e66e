"""The model catalogue: ids and aliases to models (each a pool of deployments), capabilities, prices,
org allow-lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from inferd.auth.key_record import KeyRecord
from inferd.calls.pool import Pool
from inferd.config_models import ModelConfig
from inferd.engines.base import CAPABILITY_OF_TYPE, Engine
from inferd.engines.registry import EngineRegistry
from inferd.errors import ConfigError, InvalidRequest, NotFound, PermissionDenied, ServiceUnavailable
from inferd.observe.requests import current

CHAT_TYPES = ("chat", "vision-chat")
_CAPABILITY_PARAMETERS = {
    "tools": ("tools", "tool_choice", "parallel_tool_calls"),
    "response_format": ("response_format",),
    "reasoning_effort": ("reasoning_effort",),
}


E = TypeVar("E", bound=Engine)


class Deployment:
    """One upstream of a model: its configuration (the model's, with the deployment's own keys)
    and its engine."""

    __slots__ = ("config", "engine", "name", "upstream", "_capabilities")

    def __init__(self, config: ModelConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.name = config.deployment_name  # as usage rows carry it
        self.upstream = config.upstream_model or config.id  # the model name its engine is sent
        # Checked once here: isinstance against a runtime protocol costs microseconds a call.
        self._capabilities = frozenset(kind for kind in set(CAPABILITY_OF_TYPE.values()) if isinstance(engine, kind))

    def can(self, capability: type[Engine]) -> bool:
        """Whether the engine serves `capability`."""
        return capability in self._capabilities

    def serving(self, capability: type[E]) -> E:
        """The engine as the capability a route needs (checked against the model's type when the
        catalogue was built, so this never fails for a model that passed `Model.require_type`)."""
        if capability not in self._capabilities:
            raise InvalidRequest(f"Model '{self.config.id}' cannot serve this route", code="model_type_mismatch",
                                 param="model")
        return self.engine  # type: ignore[return-value]  # checked above, once, by isinstance


@dataclass
class Model:
    """A catalogue entry: the model's configuration, its precomputed model object, and its pool of
    deployments (with their run-time state: calls in flight, cooldowns)."""

    config: ModelConfig
    deployments: tuple[Deployment, ...]
    model_object: dict[str, Any]  # without `created`, which is set per response
    pool: Pool

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
    """Resolves names to models and filters by what the caller's org may use."""

    def __init__(self, models: tuple[ModelConfig, ...], registry: EngineRegistry) -> None:
        self._models: list[Model] = []
        self._by_name: dict[str, Model] = {}
        for config in models:
            spec = registry.spec(config.engine)
            deployments = tuple(Deployment(d, registry.create(d)) for d in config.pool)
            capability = CAPABILITY_OF_TYPE.get(config.type)
            for deployment in deployments:
                if capability is not None and not deployment.can(capability):
                    raise ConfigError(f"model {config.id!r}: engine {config.engine!r} cannot serve "
                                      f"{config.type} models")
            model = Model(config, deployments, model_object(config, spec.base_parameters), Pool(config))
            self._models.append(model)
            for name in (config.id, *config.aliases):
                self._by_name[name] = model

    @property
    def models(self) -> list[Model]:
        """Every configured model."""
        return list(self._models)

    @staticmethod
    def allowed(key: KeyRecord, model: Model) -> bool:
        """Whether the key may use the model: every allow-list it falls under (its org's, its
        team's, its own) names the id or an alias."""
        for allowed in (key.allowed_models, key.team_models, key.key_models):
            if allowed is not None and not any(name in allowed for name in (model.config.id, *model.config.aliases)):
                return False
        return True

    def config_of(self, name: str) -> ModelConfig | None:
        """The configuration of the model an id or alias names, or None."""
        model = self._by_name.get(name)
        return model.config if model is not None else None

    def resolve(self, name: str, key: KeyRecord) -> Model:
        """The model for an id or alias: 404 unknown, 403 not allowed, 503 in maintenance."""
        model = self._by_name.get(name)
        if model is None:
            raise NotFound(f"Model '{name}' does not exist", code="model_not_found", param="model")
        if not self.allowed(key, model):
            raise PermissionDenied(f"Model '{name}' is not in the models allowed to this key (its org's, "
                                   "its team's or its own allow-list)",
                                   code="model_not_allowed", param="model")
        if model.config.maintenance:
            raise ServiceUnavailable(f"Model '{model.id}' is down for maintenance", code="model_maintenance")
        note = current.get()
        if note is not None:  # the request's `model` label and access log field
            note.model = model.config.id
        return model

    def fallbacks(self, model: Model, key: KeyRecord) -> list[Model]:
        """The model's `fallbacks` the key may use now, in order (not allowed or in maintenance: skipped)."""
        chosen = []
        for name in model.config.fallbacks:
            fallback = self._by_name.get(name)
            if fallback is not None and fallback is not model and not fallback.config.maintenance \
                    and self.allowed(key, fallback) and fallback not in chosen:
                chosen.append(fallback)
        return chosen

    def listing(self, key: KeyRecord) -> list[dict[str, Any]]:
        """Model objects (without `created`) the key's org may use and that are live."""
        return [m.model_object for m in self._models if not m.config.maintenance and self.allowed(key, m)]

    async def close(self) -> None:
        """Close every engine."""
        for model in self._models:
            for deployment in model.deployments:
                await deployment.engine.close()

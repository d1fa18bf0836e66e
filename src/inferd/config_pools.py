"""The pool keys of a `[[models]]` entry and its `[[models.deployments]]`.

A model is a pool of deployments. Each deployment is the model's own configuration with the
deployment's keys on top (`base_url`, `api_key`, `upstream_model`, `timeout_s`, `weight`,
`max_in_flight`, the engine's own keys), named by `name`: the `deployment` of its usage rows. A
model without `deployments` is a pool of one, named by its `deployment` key or its id.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from inferd.config_models import ModelConfig
from inferd.errors import ConfigError

ROUTINGS = ("least-busy", "round-robin", "affinity")
MAX_COOLDOWN_S = 60.0  # a deployment that keeps failing is skipped at most this long at a time

# Keys of the model's table that shape its pool, with their types.
POOL_KEYS: dict[str, type | tuple[type, ...]] = {
    "routing": str, "fallbacks": list, "cooldown_s": (int, float), "health_path": str,
    "health_interval_s": (int, float), "queue_timeout_s": (int, float), "weight": (int, float),
    "max_in_flight": int, "deployments": list,
}
# Keys a `[[models.deployments]]` table may set (besides the engine's own keys).
DEPLOYMENT_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str, "base_url": str, "api_key": str, "upstream_model": str, "timeout_s": (int, float),
    "weight": (int, float), "max_in_flight": int,
}

Fail = Callable[[str, "str | None", str], ConfigError]
Typecheck = Callable[[str, str, Any, "type | tuple[type, ...]"], None]


def check_pool_values(fail: Fail, table: str, values: dict[str, Any]) -> None:
    """Check and normalise the model-level pool keys in `values` (in place)."""
    if values.get("routing", "least-busy") not in ROUTINGS:
        raise fail(table, "routing", f"must be one of {', '.join(ROUTINGS)}")
    if "fallbacks" in values:
        if not all(isinstance(name, str) and name for name in values["fallbacks"]):
            raise fail(table, "fallbacks", "expected a list of model ids or aliases")
        values["fallbacks"] = tuple(values["fallbacks"])
    for key in ("cooldown_s", "health_interval_s", "queue_timeout_s", "weight"):
        if key in values:
            if values[key] <= 0:
                raise fail(table, key, "must be positive")
            values[key] = float(values[key])
    if "cooldown_s" in values:
        values["cooldown_s"] = min(values["cooldown_s"], MAX_COOLDOWN_S)
    if "max_in_flight" in values and values["max_in_flight"] < 1:
        raise fail(table, "max_in_flight", "must be at least 1")
    path = values.get("health_path")
    if path is not None and not path.startswith("/"):
        raise fail(table, "health_path", "must start with '/'")


def expand_deployments(fail: Fail, typecheck: Typecheck, table: str, model: "ModelConfig",
                       raw: Sequence[Any], engine_keys: tuple[str, ...]) -> "ModelConfig":
    """The model with its `deployments`: each its own ModelConfig (the model's, with the
    deployment's keys on top, no deployments of its own)."""
    if not raw:
        raise fail(table, "deployments", "must list at least one deployment (or be left out)")
    deployments = []
    for index, entry in enumerate(raw):
        where = f"{table} deployments #{index + 1}"
        if not isinstance(entry, dict):
            raise fail(where, None, "expected a table")
        values: dict[str, Any] = {}
        options: dict[str, Any] = {}
        for key, value in entry.items():
            if key in DEPLOYMENT_KEYS:
                typecheck(where, key, value, DEPLOYMENT_KEYS[key])
                values[key] = value
            elif key in engine_keys:
                options[key] = value
            else:
                raise fail(where, key, f"unknown key for a deployment of engine {model.engine!r}")
        name = values.pop("name", None)
        if not name:
            raise fail(where, "name", "missing (every deployment needs a name)")
        if "timeout_s" in values:
            if values["timeout_s"] <= 0:
                raise fail(where, "timeout_s", "must be positive")
            values["timeout_s"] = float(values["timeout_s"])
        if "weight" in values:
            if values["weight"] <= 0:
                raise fail(where, "weight", "must be positive")
            values["weight"] = float(values["weight"])
        if "max_in_flight" in values and values["max_in_flight"] < 1:
            raise fail(where, "max_in_flight", "must be at least 1")
        deployments.append(dataclasses.replace(model, deployment=name, options={**model.options, **options},
                                               **values))
    return dataclasses.replace(model, deployments=tuple(deployments))


def check_pools(models: Sequence["ModelConfig"], source: str) -> None:
    """Deployment names unique across the catalogue; every fallback names another known model."""
    # A pool of one named by its `deployment` key may share that name with another (one engine
    # server serving two models); a `[[models.deployments]]` name is unique.
    implicit = {model.deployment_name: model.id for model in models if not model.deployments}
    names: dict[str, str] = {}
    known: Mapping[str, str] = {name: m.id for m in models for name in (m.id, *m.aliases)}
    for model in models:
        for deployment in model.deployments:
            name = deployment.deployment_name
            owner = names.get(name) or implicit.get(name)
            if owner is not None:
                raise ConfigError(f"{source}: [[models]] (id '{model.id}'): deployment name {name!r} is already "
                                  f"used by model {owner!r}")
            names[name] = model.id
        for fallback in model.fallbacks:
            if fallback not in known:
                raise ConfigError(f"{source}: [[models]] (id '{model.id}'), key 'fallbacks': no model {fallback!r}")
            if known[fallback] == model.id:
                raise ConfigError(f"{source}: [[models]] (id '{model.id}'), key 'fallbacks': a model cannot fall "
                                  "back to itself")

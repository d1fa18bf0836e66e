"""Every configuration key and INFERD_* variable the code reads is named in docs/configuration.md.

The keys come from the lists the configuration loaders check unknown keys against (config.py,
config_alerts.py, config_cache.py, config_guardrails.py, config_pools.py, config_storage.py, config_web_search.py, the engines' option keys), and the variables from a search of
the source, so a key added to the code without a line in the documentation fails here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from inferd import (config, config_alerts, config_cache, config_guardrails, config_pools, config_storage,
                    config_tracing, config_web_search)
from inferd.engines.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
VARIABLE = re.compile(r"\bINFERD_[A-Z0-9]+(?:_[A-Z0-9]+)*")
# `_parse_observe` lists its tables' keys inline: ("[metrics]", metrics, ("enabled",)).
OBSERVE_KEYS = re.compile(r'\("\[(\w+)\]", \w+, \(([^)]*)\)\)')


def table_keys() -> dict[str, set[str]]:
    """Table -> the keys the loaders accept in it."""
    observe = dict(OBSERVE_KEYS.findall(Path(config.__file__).read_text(encoding="utf-8")))
    assert set(observe) == {"metrics", "logging"}, observe
    engine_keys = {key for keys in default_registry().option_keys().values() for key in keys}
    return {
        "models": {*config._MODEL_KEYS, *config_pools.POOL_KEYS, *engine_keys},
        "models cost": set(config._COST_KEYS),
        "models.deployments": set(config_pools.DEPLOYMENT_KEYS),
        "idp": set(config._IDP_KEYS),
        "conversations": set(config._CONVERSATION_KEYS),
        "batches": {f.name for f in dataclasses.fields(config.BatchConfig)},
        "limits": {f.name for f in dataclasses.fields(config.RequestLimits)},
        "audio": {f.name for f in dataclasses.fields(config.AudioConfig)},
        "alerts": {f.name for f in dataclasses.fields(config_alerts.AlertsConfig)},
        "cache": {f.name for f in dataclasses.fields(config_cache.CacheConfig)},
        "web_search": {f.name for f in dataclasses.fields(config_web_search.WebSearchConfig)},
        "guardrails": set(config_guardrails._KNOWN),
        "tracing": {f.name for f in dataclasses.fields(config_tracing.TracingConfig)},
        "storage": {f.name for f in dataclasses.fields(config_storage.StorageConfig)},
        **{table: set(re.findall(r'"(\w+)"', keys)) for table, keys in observe.items()},
    }


def variables() -> set[str]:
    """Every INFERD_* name written in the server's and the client's source."""
    found: set[str] = set()
    for package in ("inferd", "inferd_client"):
        for path in (ROOT / "src" / package).rglob("*.py"):
            found.update(VARIABLE.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_table_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [t for t in config._TOP_LEVEL if f"[{t}]" not in text and f"[[{t}]]" not in text]
    assert not missing, f"tables not in docs/configuration.md: {missing}"


def test_every_key_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = sorted(f"[{table}] {key}" for table, keys in table_keys().items() for key in keys
                     if f"`{key}`" not in text and f"] {key}`" not in text)
    assert not missing, f"keys the code reads but docs/configuration.md does not name: {missing}"


def test_every_environment_variable_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    found = variables()
    assert {"INFERD_CONFIG", "INFERD_DATABASE_URL", "INFERD_REDIS_URL"} <= found  # the search works
    missing = sorted(name for name in found if f"`{name}`" not in text)
    assert not missing, f"variables the code reads but docs/configuration.md does not name: {missing}"

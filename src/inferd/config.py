"""Settings (environment) and the TOML catalogue, read once and typed.

No other module reads the environment. A wrong configuration file fails at
start with a message naming the file, the table and the key.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, TypeVar

from inferd.builtin import builtin_tables, default_aliases, settle_names, with_image_alias
from inferd.config_alerts import AlertsConfig, parse_alerts
from inferd.config_cache import CacheConfig, parse_cache
from inferd.config_guardrails import GuardrailConfig, parse_guardrails
from inferd.config_models import Cost, ModelConfig
from inferd.config_pools import POOL_KEYS, check_pool_values, check_pools, expand_deployments
from inferd.config_storage import StorageConfig, parse_storage
from inferd.config_tracing import TracingConfig, parse_tracing
from inferd.config_web_search import WebSearchConfig, parse_web_search
from inferd.errors import ConfigError

MODEL_TYPES = ("chat", "vision-chat", "embeddings", "reranker", "ocr", "ocr-vision", "tts", "asr", "image-gen")
CAPABILITIES = ("tools", "response_format", "reasoning_effort", "image_input")
THINKING_MODES = ("none", "hybrid", "always", "never")
# `image_urls`: which image URLs a model with `image_input` is sent: any, or only `data:` URLs
# (refused otherwise, so the upstream never fetches a URL a client chose).
IMAGE_URL_POLICIES = ("any", "data-only")


@dataclass(frozen=True)
class IdpConfig:
    """How `idp_token` values are verified on POST /v1/auth/exchange."""

    issuer: str | None = None
    audience: str | None = None
    hs256_secret: str | None = None
    jwks_file: str | None = None


@dataclass(frozen=True)
class BatchConfig:
    """The `[batches]` table: the window, file retention and pacing."""

    window_seconds: float = 86400.0
    retention_seconds: float = 2505600.0
    max_concurrency: int = 8


@dataclass(frozen=True)
class RequestLimits:
    """The `[limits]` table: what one request may take of the server.

    The byte caps per route are fixed by the contract; the operator sets how long a body may take
    to arrive: `body_timeout_s` of grace, then at least 64 KiB/s on average (408 otherwise)."""

    body_timeout_s: float = 30.0


@dataclass(frozen=True)
class AudioConfig:
    """The `[audio]` table: transcription refuses audio longer than `max_duration_s` (400)."""

    max_duration_s: float = 3600.0


LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class ObserveConfig:
    """`[metrics] enabled` (GET /metrics; false: 404) and `[logging] format` (text, or json: one
    object per request on stderr)."""

    metrics_enabled: bool = True
    log_format: str = "text"


@dataclass(frozen=True)
class Catalogue:
    """Everything the TOML file holds."""

    models: tuple[ModelConfig, ...] = ()
    idp: IdpConfig | None = None
    conversations: Mapping[str, Any] = field(default_factory=dict)
    batches: BatchConfig = field(default_factory=BatchConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    limits: RequestLimits = field(default_factory=RequestLimits)
    observe: ObserveConfig = field(default_factory=ObserveConfig)
    alerts: AlertsConfig | None = None  # `[alerts]`: budget alerts by webhook; None: none sent
    web_search: WebSearchConfig | None = None  # `[web_search]`: the provider of `webSearch=true`; None: ignored
    guardrails: tuple[GuardrailConfig, ...] = ()  # `[[guardrails]]`
    cache: CacheConfig = field(default_factory=CacheConfig)  # `[cache]`: the response cache (off by default)
    storage: StorageConfig = field(default_factory=StorageConfig)  # `[storage]`: where file bytes live
    tracing: TracingConfig | None = None  # `[tracing]`; None: traced only when the environment names a collector
    source: str = "built-in catalogue"


@dataclass(frozen=True)
class Settings:
    """The environment (docs/configuration.md, Environment variables), typed. Build with `Settings.from_env()`."""

    config_path: Path | None
    data_dir: Path
    database_url: str
    redis_url: str | None
    redis_prefix: str
    model_dir: Path
    batch_worker: bool = True  # run the batch worker inside `inferd serve`
    log_format: str | None = None  # `--log-format` / INFERD_LOG_FORMAT; wins over `[logging] format`
    # The standard OpenTelemetry variables naming a collector (config_tracing.py); the file's wins.
    otlp_endpoint: str | None = None  # OTEL_EXPORTER_OTLP_ENDPOINT: a base URL
    otlp_traces_endpoint: str | None = None  # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: the full traces URL

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Read INFERD_* variables; keyword overrides (from the command line) win."""
        env = os.environ if environ is None else environ
        config = overrides.get("config_path") or env.get("INFERD_CONFIG") or None
        data_dir = Path(overrides.get("data_dir") or env.get("INFERD_DATA_DIR") or "./data").expanduser()
        database_url = overrides.get("database_url") or env.get("INFERD_DATABASE_URL") or ""
        if not database_url:
            database_url = f"sqlite:///{data_dir.resolve() / 'inferd.db'}"
        model_dir = Path(env.get("INFERD_MODEL_DIR") or "~/.cache/inferd/models").expanduser()
        return cls(
            config_path=Path(config).expanduser() if config else None,
            data_dir=data_dir,
            database_url=database_url,
            redis_url=overrides.get("redis_url") or env.get("INFERD_REDIS_URL") or None,
            redis_prefix=env.get("INFERD_REDIS_PREFIX") or "inferd:",
            model_dir=model_dir,
            batch_worker=overrides.get("batch_worker", env.get("INFERD_BATCH_WORKER", "1") != "0"),
            log_format=overrides.get("log_format") or env.get("INFERD_LOG_FORMAT") or None,
            otlp_endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
            otlp_traces_endpoint=env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None,
        )

    def environ(self) -> dict[str, str]:
        """These settings as INFERD_* variables, for worker processes."""
        values = {
            "INFERD_DATA_DIR": str(self.data_dir),
            "INFERD_DATABASE_URL": self.database_url,
            "INFERD_REDIS_PREFIX": self.redis_prefix,
            "INFERD_MODEL_DIR": str(self.model_dir),
        }
        if self.config_path:
            values["INFERD_CONFIG"] = str(self.config_path)
        if self.redis_url:
            values["INFERD_REDIS_URL"] = self.redis_url
        if not self.batch_worker:
            values["INFERD_BATCH_WORKER"] = "0"
        if self.log_format:
            values["INFERD_LOG_FORMAT"] = self.log_format
        return values


# --- the TOML file --------------------------------------------------------------------------

_MODEL_KEYS: dict[str, type | tuple[type, ...]] = {
    "id": str, "type": str, "engine": str, "base_url": str, "upstream_model": str, "api_key": str,
    "context_length": int, "aliases": list, "capabilities": list, "thinking": str, "tokenizer": str,
    "cost": dict, "model_full_name": str, "description": str, "use_when": str,
    "timeout_s": (int, float), "model_icon_url": str, "owned_by": str, "prefix_cache": bool,
    "maintenance": bool, "supported_parameters": list, "builtin": bool, "deployment": str, "image_urls": str,
    "rpm": int, "tpm": int, "cache": bool,
}
_COST_KEYS = ("input_per_m_token", "output_per_m_token", "image_per_generation")
_IDP_KEYS = ("issuer", "audience", "hs256_secret", "jwks_file")
_TOP_LEVEL = ("models", "idp", "conversations", "batches", "limits", "audio", "metrics", "logging", "alerts",
              "web_search", "guardrails", "cache", "storage",
              "tracing")


class _Where:
    """Builds error messages that name the file, the table and the key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, table: str, key: str | None, problem: str) -> ConfigError:
        where = f"{table}, key '{key}'" if key else table
        return ConfigError(f"{self.source}: {where}: {problem}")


def _typecheck(where: _Where, table: str, key: str, value: Any, expected: type | tuple[type, ...]) -> None:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise where.fail(table, key, f"expected {names}, got {type(value).__name__} {value!r}")


def _string_list(where: _Where, table: str, key: str, value: list[Any], allowed: tuple[str, ...] | None = None
                 ) -> tuple[str, ...]:
    for item in value:
        if not isinstance(item, str):
            raise where.fail(table, key, f"expected a list of strings, found {item!r}")
        if allowed is not None and item not in allowed:
            raise where.fail(table, key, f"unknown value {item!r} (allowed: {', '.join(allowed)})")
    return tuple(value)


def _parse_model(where: _Where, index: int, raw: Any, engine_keys: Mapping[str, tuple[str, ...]]) -> ModelConfig:
    table = f"[[models]] #{index + 1}"
    if not isinstance(raw, dict):
        raise where.fail(table, None, "expected a table")
    if "id" not in raw:
        raise where.fail(table, "id", "missing (every model needs an id)")
    table = f"[[models]] #{index + 1} (id '{raw['id']}')"
    values: dict[str, Any] = {}
    options: dict[str, Any] = {}
    engine = raw.get("engine", "openai")
    if not isinstance(engine, str):
        raise where.fail(table, "engine", f"expected str, got {engine!r}")
    if engine not in engine_keys:
        raise where.fail(table, "engine", f"unknown engine {engine!r} (known: {', '.join(sorted(engine_keys))})")
    own_keys = engine_keys.get(engine, ())
    deployments: list[Any] | None = None
    for key, value in raw.items():
        if key == "deployments":
            _typecheck(where, table, key, value, list)
            deployments = value
        elif key in _MODEL_KEYS or key in POOL_KEYS:
            _typecheck(where, table, key, value, _MODEL_KEYS.get(key) or POOL_KEYS[key])
            values[key] = value
        elif key in own_keys:
            options[key] = value
        else:
            raise where.fail(table, key, f"unknown key for engine {engine!r}")
    if not values["id"] or len(values["id"]) > 256:
        raise where.fail(table, "id", "must be 1 to 256 characters")
    if values.get("type", "chat") not in MODEL_TYPES:
        raise where.fail(table, "type", f"unknown model type {values['type']!r} (known: {', '.join(MODEL_TYPES)})")
    if values.get("thinking", "none") not in THINKING_MODES:
        raise where.fail(table, "thinking", f"must be one of {', '.join(THINKING_MODES)}")
    if values.get("image_urls", "any") not in IMAGE_URL_POLICIES:
        raise where.fail(table, "image_urls", f"must be one of {', '.join(IMAGE_URL_POLICIES)}")
    for key in ("aliases", "supported_parameters"):
        if key in values:
            values[key] = _string_list(where, table, key, values[key])
    if "capabilities" in values:
        values["capabilities"] = _string_list(where, table, "capabilities", values["capabilities"], CAPABILITIES)
        if "thinking" not in values and "reasoning_effort" in values["capabilities"]:
            values["thinking"] = "hybrid"
    if values.get("thinking") in ("hybrid", "always") and "reasoning_effort" not in values.get("capabilities", ()):
        # A model that thinks says so in its capabilities too, as its supported_parameters do.
        values["capabilities"] = (*values.get("capabilities", ()), "reasoning_effort")
    if "context_length" in values and values["context_length"] < 1:
        raise where.fail(table, "context_length", "must be a positive integer")
    for key in ("rpm", "tpm"):
        if key in values and not 1 <= values[key] < 2**31:
            raise where.fail(table, key, "must be a positive integer below 2**31")
    if "timeout_s" in values:
        if values["timeout_s"] <= 0:
            raise where.fail(table, "timeout_s", "must be positive")
        values["timeout_s"] = float(values["timeout_s"])
    tokenizer = values.get("tokenizer")
    if tokenizer is not None and tokenizer not in ("upstream", "estimate"):
        if not tokenizer.startswith("hf:"):
            raise where.fail(table, "tokenizer", "must be 'upstream', 'estimate' or 'hf:PATH'")
        local = Path(tokenizer[3:]).expanduser()
        if not local.is_absolute():
            local = Path(where.source).parent / local
        wanted = local / "tokenizer.json" if local.is_dir() else local
        if not wanted.is_file():
            raise where.fail(table, "tokenizer", f"no tokenizer.json at {wanted}")
        values["tokenizer"] = f"hf:{local.resolve()}"
    if "cost" in values:
        cost = values["cost"]
        for key, price in cost.items():
            if key not in _COST_KEYS:
                raise where.fail(f"{table} cost", key, "unknown price key")
            _typecheck(where, f"{table} cost", key, price, (int, float))
            if price < 0:
                raise where.fail(f"{table} cost", key, "must not be negative")
        values["cost"] = Cost(**{k: float(v) for k, v in cost.items()})
    check_pool_values(where.fail, table, values)
    model = ModelConfig(options=options, **values)
    if deployments is None:
        return model
    return expand_deployments(where.fail, lambda t, k, v, e: _typecheck(where, t, k, v, e), table, model,
                              deployments, own_keys)


def _with_builtin(where: _Where, index: int, raw: Any, builtins: Mapping[str, dict[str, Any]]) -> Any:
    """A `builtin = true` entry: the built-in model's table, with the keys the entry sets on top."""
    if not isinstance(raw, dict) or raw.get("builtin") is not True:
        return raw
    if raw.get("id") not in builtins:
        raise where.fail(f"[[models]] #{index + 1}", "id", f"no built-in model {raw.get('id')!r} "
                         f"(built-in: {', '.join(builtins)})")
    return {**builtins[raw["id"]], **raw}


def _parse_idp(where: _Where, raw: Any) -> IdpConfig:
    if not isinstance(raw, dict):
        raise where.fail("[idp]", None, "expected a table")
    for key, value in raw.items():
        if key not in _IDP_KEYS:
            raise where.fail("[idp]", key, "unknown key")
        _typecheck(where, "[idp]", key, value, str)
    for key in ("issuer", "audience"):  # tokens are always checked against both
        if not raw.get(key):
            raise where.fail("[idp]", key, "missing (idp tokens are verified against issuer and audience)")
    if raw.get("hs256_secret") and raw.get("jwks_file"):
        raise where.fail("[idp]", "jwks_file", "set either hs256_secret or jwks_file, not both")
    if not raw.get("hs256_secret") and not raw.get("jwks_file"):
        raise where.fail("[idp]", "hs256_secret", "missing (set hs256_secret or jwks_file)")
    return IdpConfig(**raw)


def _parse_batches(where: _Where, raw: dict[str, Any]) -> BatchConfig:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("window_seconds", "retention_seconds"):
            _typecheck(where, "[batches]", key, value, (int, float))
            if value <= 0:
                raise where.fail("[batches]", key, "must be positive")
            values[key] = float(value)
        elif key == "max_concurrency":
            _typecheck(where, "[batches]", key, value, int)
            if value < 1:
                raise where.fail("[batches]", key, "must be at least 1")
            values[key] = value
        else:
            raise where.fail("[batches]", key, "unknown key (known: window_seconds, retention_seconds, "
                             "max_concurrency)")
    return BatchConfig(**values)


_Numbers = TypeVar("_Numbers", "RequestLimits", "AudioConfig")


def _positive_numbers(where: _Where, table: str, raw: dict[str, Any], kind: type[_Numbers]) -> _Numbers:
    """A table of positive numbers whose keys are the fields of `kind` (`[limits]`, `[audio]`)."""
    known = [f.name for f in fields(kind)]
    for key, value in raw.items():
        if key not in known:
            raise where.fail(table, key, f"unknown key (known: {', '.join(known)})")
        _typecheck(where, table, key, value, (int, float))
        if value <= 0:
            raise where.fail(table, key, "must be positive")
    return kind(**{key: float(value) for key, value in raw.items()})


def _parse_observe(where: _Where, metrics: dict[str, Any], logging_: dict[str, Any]) -> ObserveConfig:
    for table, raw, known in (("[metrics]", metrics, ("enabled",)), ("[logging]", logging_, ("format",))):
        for key in raw:
            if key not in known:
                raise where.fail(table, key, f"unknown key (known: {', '.join(known)})")
    enabled = metrics.get("enabled", True)
    _typecheck(where, "[metrics]", "enabled", enabled, bool)
    log_format = logging_.get("format", "text")
    _typecheck(where, "[logging]", "format", log_format, str)
    if log_format not in LOG_FORMATS:
        raise where.fail("[logging]", "format", f"expected one of {', '.join(LOG_FORMATS)}")
    return ObserveConfig(metrics_enabled=enabled, log_format=log_format)


MAX_RETRIEVAL_TOP_K = 20  # passages a generate turn retrieves before its first model call (services/retrieval.py)

# `[conversations]` keys and their types; readers use `.get(key, default)`.
_CONVERSATION_KEYS: dict[str, type | tuple[type, ...]] = {
    "embedding_model": str, "default_chat_model": str, "max_tool_steps": int,
    "ephemeral_ttl_seconds": (int, float), "extract_timeout_s": (int, float), "retrieval_top_k": int,
    "retrieval_tokens": int,
}


def _parse_conversations(where: _Where, raw: dict[str, Any]) -> dict[str, Any]:
    for key, value in raw.items():
        if key not in _CONVERSATION_KEYS:
            raise where.fail("[conversations]", key, f"unknown key (known: {', '.join(_CONVERSATION_KEYS)})")
        _typecheck(where, "[conversations]", key, value, _CONVERSATION_KEYS[key])
        if key in ("max_tool_steps", "ephemeral_ttl_seconds", "extract_timeout_s", "retrieval_top_k",
                   "retrieval_tokens") and value <= 0:
            raise where.fail("[conversations]", key, "must be positive")
        if key == "retrieval_top_k" and value > MAX_RETRIEVAL_TOP_K:
            raise where.fail("[conversations]", key, f"must be at most {MAX_RETRIEVAL_TOP_K}")
    return dict(raw)


def load_catalogue(path: Path | None, engine_keys: Mapping[str, tuple[str, ...]],
                   model_dir: Path | None = None) -> Catalogue:
    """Read and check the TOML file; `None` gives the built-in catalogue."""
    builtins = builtin_tables(model_dir or Path("~/.cache/inferd/models").expanduser())
    if path is None:
        where = _Where("built-in catalogue")
        return Catalogue(models=tuple(_parse_model(where, i, t, engine_keys) for i, t in enumerate(builtins.values())))
    where = _Where(str(path))
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for key in raw:
        if key not in _TOP_LEVEL:
            raise where.fail(f"[{key}]", None, f"unknown table (known: {', '.join(_TOP_LEVEL)})")
    models_raw = raw.get("models", [])
    if not isinstance(models_raw, list):
        raise where.fail("[[models]]", None, "expected an array of tables")
    models = tuple(_parse_model(where, i, _with_builtin(where, i, m, builtins), engine_keys)
                   for i, m in enumerate(models_raw))
    models = with_image_alias(settle_names(models, [default_aliases(m, builtins) for m in models_raw], str(path)))
    check_pools(models, str(path))
    for table in ("conversations", "batches", "limits", "audio", "metrics", "logging"):
        if table in raw and not isinstance(raw[table], dict):
            raise where.fail(f"[{table}]", None, "expected a table")
    return Catalogue(
        models=models,
        idp=_parse_idp(where, raw["idp"]) if "idp" in raw else None,
        conversations=_parse_conversations(where, raw.get("conversations", {})),
        batches=_parse_batches(where, raw.get("batches", {})),
        limits=_positive_numbers(where, "[limits]", raw.get("limits", {}), RequestLimits),
        audio=_positive_numbers(where, "[audio]", raw.get("audio", {}), AudioConfig),
        observe=_parse_observe(where, raw.get("metrics", {}), raw.get("logging", {})),
        alerts=parse_alerts(where.fail, raw["alerts"]) if "alerts" in raw else None,
        web_search=parse_web_search(where.fail, raw["web_search"]) if "web_search" in raw else None,
        guardrails=parse_guardrails(where.fail, raw["guardrails"]) if "guardrails" in raw else (),
        cache=parse_cache(where.fail, raw["cache"]) if "cache" in raw else CacheConfig(),
        storage=parse_storage(where.fail, raw["storage"]) if "storage" in raw else StorageConfig(),
        tracing=parse_tracing(where.fail, raw["tracing"]) if "tracing" in raw else None,
        source=str(path),
    )

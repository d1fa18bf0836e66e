"""The `[tracing]` table: OpenTelemetry traces exported over OTLP/HTTP.

```toml
[tracing]
otlp_endpoint = "http://collector:4318"  # the collector; spans go to {otlp_endpoint}/v1/traces
service_name = "inferd"                  # the `service.name` of every span's resource
capture_content = false                  # true: prompts and replies go into the spans too
sample_ratio = 1.0                       # share of new traces kept (a client's traceparent decides for its own)
max_queue_size = 2048                    # spans waiting for export; past it new spans are dropped (and counted)
export_timeout_s = 10.0                  # the longest one export to the collector may take
```

Tracing is on when an endpoint is known: the table's `otlp_endpoint`, else the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL, `/v1/traces` appended) or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL) of the environment, read by `Settings`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable
from urllib.parse import urlsplit

from inferd.errors import ConfigError

TABLE = "[tracing]"
TRACES_PATH = "/v1/traces"
MAX_QUEUE = 1_000_000

Fail = Callable[[str, str | None, str], ConfigError]


@dataclass(frozen=True)
class TracingConfig:
    """What the `[tracing]` table says (the endpoint may also come from the environment)."""

    otlp_endpoint: str | None = None
    service_name: str = "inferd"
    capture_content: bool = False
    sample_ratio: float = 1.0
    max_queue_size: int = 2048
    export_timeout_s: float = 10.0


def traces_url(base: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT` is
    read): `/v1/traces` appended, unless the URL already ends with it."""
    base = base.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def _check_url(fail: Fail, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise fail(TABLE, key, "expected a non-empty string")
    url = urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise fail(TABLE, key, "expected an http:// or https:// URL (the collector's OTLP/HTTP port, often 4318)")
    return value


def parse_tracing(fail: Fail, raw: Any) -> TracingConfig:
    """The checked `[tracing]` table; ConfigError naming the key otherwise."""
    if not isinstance(raw, dict):
        raise fail(TABLE, None, "expected a table")
    known = [f.name for f in fields(TracingConfig)]
    for key in raw:
        if key not in known:
            raise fail(TABLE, key, f"unknown key (known: {', '.join(known)})")
    endpoint = _check_url(fail, "otlp_endpoint", raw["otlp_endpoint"]) if "otlp_endpoint" in raw else None
    name = raw.get("service_name", "inferd")
    if not isinstance(name, str) or not name.strip():
        raise fail(TABLE, "service_name", "expected a non-empty string")
    capture = raw.get("capture_content", False)
    if not isinstance(capture, bool):
        raise fail(TABLE, "capture_content", "expected true or false")
    ratio = raw.get("sample_ratio", 1.0)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= ratio <= 1.0:
        raise fail(TABLE, "sample_ratio", "expected a number from 0 to 1")
    queue = raw.get("max_queue_size", 2048)
    if isinstance(queue, bool) or not isinstance(queue, int) or not 1 <= queue <= MAX_QUEUE:
        raise fail(TABLE, "max_queue_size", f"expected an integer from 1 to {MAX_QUEUE}")
    timeout = raw.get("export_timeout_s", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise fail(TABLE, "export_timeout_s", "expected a positive number")
    return TracingConfig(otlp_endpoint=endpoint, service_name=name.strip(), capture_content=capture,
                         sample_ratio=float(ratio), max_queue_size=queue, export_timeout_s=float(timeout))


def resolve_tracing(config: TracingConfig | None, env_endpoint: str | None,
                    env_traces_endpoint: str | None) -> tuple[TracingConfig, str] | None:
    """The tracing settings and the full traces URL, or None when tracing is off (no endpoint
    anywhere). The file's `otlp_endpoint` wins; then the environment's traces URL, then its base URL.
    A `[tracing]` table with no endpoint anywhere is a mistake, not a way to turn tracing off."""
    settings = config or TracingConfig()
    if settings.otlp_endpoint:
        return settings, traces_url(settings.otlp_endpoint)
    if env_traces_endpoint:
        return settings, env_traces_endpoint
    if env_endpoint:
        return settings, traces_url(env_endpoint)
    if config is not None:
        raise ConfigError(f"{TABLE}: no otlp_endpoint, and neither OTEL_EXPORTER_OTLP_ENDPOINT nor "
                          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set: where should spans go?")
    return None

"""The `[tracing]` table and the environment's collector, W3C `traceparent` parsing, and tracing
off loading nothing of OpenTelemetry's SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inferd.config import Settings, load_catalogue
from inferd.config_tracing import TracingConfig, resolve_tracing
from inferd.engines.registry import default_registry
from inferd.errors import ConfigError
from inferd.tracing.context import parse_traceparent


def load(tmp_path: Path, table: str) -> TracingConfig | None:
    path = tmp_path / "inferd.toml"
    path.write_text('[[models]]\nid = "m"\nbase_url = "http://127.0.0.1:9/v1"\n' + table, encoding="utf-8")
    return load_catalogue(path, default_registry().option_keys()).tracing


def test_the_table_is_checked_key_by_key(tmp_path: Path) -> None:
    config = load(tmp_path, '[tracing]\notlp_endpoint = "http://otel:4318"\ncapture_content = true\n'
                            'sample_ratio = 0.25\nmax_queue_size = 100\nexport_timeout_s = 2\n')
    assert config == TracingConfig("http://otel:4318", "inferd", True, 0.25, 100, 2.0)
    assert load(tmp_path, "") is None
    for table, key in (('otlp_endpoint = "otel:4318"', "otlp_endpoint"), ("capture_content = 1", "capture_content"),
                       ("sample_ratio = 1.5", "sample_ratio"), ("max_queue_size = 0", "max_queue_size"),
                       ("export_timeout_s = 0", "export_timeout_s"), ('service_name = ""', "service_name"),
                       ("collector = 1", "collector")):
        with pytest.raises(ConfigError, match=rf"\[tracing\], key '{key}'"):
            load(tmp_path, f"[tracing]\n{table}\n")


def test_the_collector_comes_from_the_file_then_the_environment() -> None:
    file = TracingConfig(otlp_endpoint="http://file:4318/")
    assert resolve_tracing(file, "http://env:4318", None) == (file, "http://file:4318/v1/traces")
    assert resolve_tracing(None, "http://env:4318", None) == (TracingConfig(), "http://env:4318/v1/traces")
    assert resolve_tracing(None, "http://env:4318", "http://t:1/x") == (TracingConfig(), "http://t:1/x")
    assert resolve_tracing(TracingConfig(otlp_endpoint="http://c/v1/traces"), None, None)[1] == "http://c/v1/traces"
    assert resolve_tracing(None, None, None) is None  # off: the default
    with pytest.raises(ConfigError, match="no otlp_endpoint"):
        resolve_tracing(TracingConfig(capture_content=True), None, None)
    settings = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318"})
    assert settings.otlp_endpoint == "http://env:4318" and settings.otlp_traces_endpoint is None


def test_traceparent_parsing_follows_w3c_trace_context() -> None:
    trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    assert parse_traceparent(f"00-{trace}-{parent}-01") == (int(trace, 16), int(parent, 16), 1)
    assert parse_traceparent(f"00-{trace}-{parent}-00") == (int(trace, 16), int(parent, 16), 0)
    assert parse_traceparent(f"cc-{trace}-{parent}-01-future") == (int(trace, 16), int(parent, 16), 1)
    for bad in (f"00-{trace}-{parent}-01-extra", f"ff-{trace}-{parent}-01", f"00-{'0' * 32}-{parent}-01",
                f"00-{trace}-{'0' * 16}-01", f"00-{trace.upper()}-{parent}-01", f"00-{trace}-{parent}", "", "garbage"):
        assert parse_traceparent(bad) is None, bad


def test_tracing_off_loads_nothing_of_the_sdk() -> None:
    code = ("import sys, inferd.app, inferd.wiring, inferd.calls.stage, inferd.api.hot, inferd.engines.openai_http, "
            "inferd.services.generate\n"
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter', "
            "'inferd.tracing.export', 'inferd.tracing.spans'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out

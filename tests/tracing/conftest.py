"""Servers that trace to a loopback collector: one naming it in `[tracing]`, one finding it
through `OTEL_EXPORTER_OTLP_ENDPOINT` with `capture_content = true`, and one whose collector
accepts connections and never answers."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.harness import Backend, Server, Upstream, serving
from tests.tracing.collector import Collector, SilentCollector

MODELS_TOML = """
[conversations]
embedding_model = "tr-embed"
default_chat_model = "tr-chat"

[[models]]
id = "tr-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "tr-echo"
base_url = "{upstream}/v1"
upstream_model = "mock-echo"
tokenizer = "upstream"

[[models]]
id = "tr-pool"
upstream_model = "mock"
tokenizer = "upstream"
[[models.deployments]]
name = "tr-pool-bad"
base_url = "{upstream}/v1"
upstream_model = "mock-error-503"
[[models.deployments]]
name = "tr-pool-good"
base_url = "{upstream}/v1"

[[models]]
id = "tr-broken"
base_url = "{upstream}/v1"
upstream_model = "mock-error-500"
tokenizer = "upstream"

[[models]]
id = "tr-embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[models]]
id = "tr-rerank"
type = "reranker"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[models]]
id = "tr-asr"
type = "asr"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[models]]
id = "tr-image"
type = "image-gen"
base_url = "{upstream}/v1"
upstream_model = "mock"
"""


GUARDED_ORG = "tr-guarded"
GUARDRAIL_TOML = f"""
[[guardrails]]
name = "no-pii"
kind = "pii"
action = "redact"
entities = ["email"]
applies_to = ["{GUARDED_ORG}"]
"""


def tracing_table(**keys: object) -> str:
    """A `[tracing]` table; the braces doubled for `write_config`'s format."""
    lines = [f"{key} = {value!r}".replace("'", '"').replace("True", "true").replace("False", "false")
             for key, value in keys.items()]
    return "\n[tracing]\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="package")
def collector() -> Iterator[Collector]:
    receiver = Collector()
    yield receiver
    receiver.close()


@pytest.fixture(scope="package")
def traced_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream,
                  collector: Collector) -> Iterator[Server]:
    """Traces to `collector`, named in `[tracing]`; content not captured (the default)."""
    config = MODELS_TOML + tracing_table(otlp_endpoint=collector.base_url, service_name="inferd-test")
    with serving(tmp_path_factory.mktemp("traced"), backend, upstream, config) as server:
        yield server


@pytest.fixture(scope="package")
def capture_collector() -> Iterator[Collector]:
    receiver = Collector()
    yield receiver
    receiver.close()


@pytest.fixture(scope="package")
def capture_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream,
                   capture_collector: Collector) -> Iterator[Server]:
    """Finds its collector through OTEL_EXPORTER_OTLP_ENDPOINT; `capture_content = true`; the org
    GUARDED_ORG's calls go through a PII guardrail."""
    config = MODELS_TOML + tracing_table(capture_content=True) + GUARDRAIL_TOML
    with serving(tmp_path_factory.mktemp("capture"), backend, upstream, config,
                 extra_env={"OTEL_EXPORTER_OTLP_ENDPOINT": capture_collector.base_url}) as server:
        yield server


@pytest.fixture(scope="package")
def silent_collector() -> Iterator[SilentCollector]:
    receiver = SilentCollector()
    yield receiver
    receiver.close()

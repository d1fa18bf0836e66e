"""A server for the observability tests: a fake upstream, a pool with a dead deployment, a model
whose only deployment is dead and falls back, and a model with room for one call at a time."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.harness import Backend, Server, Upstream, serving

OBSERVE_TOML = """
[[models]]
id = "obs-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "obs-drip"
base_url = "{upstream}/v1"
upstream_model = "mock-drip-0.3"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "obs-narrow"
base_url = "{upstream}/v1"
upstream_model = "mock-drip-0.4"
max_in_flight = 1
queue_timeout_s = 0.2

[[models]]
id = "obs-pool"
upstream_model = "mock"
cooldown_s = 60
[[models.deployments]]
name = "obs-dead"
base_url = "http://127.0.0.1:{dead_port}/v1"
[[models.deployments]]
name = "obs-live"
base_url = "{upstream}/v1"

[[models]]
id = "obs-gone"
base_url = "http://127.0.0.1:{dead_port}/v1"
upstream_model = "mock"
fallbacks = ["obs-chat"]

[[models]]
id = "obs-embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 0.0 }}
"""


@pytest.fixture(scope="module")
def obs_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve --log-format json` on the catalogue above."""
    with serving(tmp_path_factory.mktemp("observe"), backend, upstream, OBSERVE_TOML,
                 args=("--log-format", "json")) as server:
        yield server

"""A server whose catalogue has what the Messages API tests need beside the session's: a model
that calls tools (blocking and streamed), one that takes images, one that reports the stop string,
pools whose deployments fail (one falls back to another model), and a model with room for one call
at a time."""

from __future__ import annotations

from typing import Iterator

import anthropic
import pytest

from tests.harness import Backend, Server, Upstream, serving

MESSAGES_TOML = """
[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
context_length = 4096
tokenizer = "upstream"
prefix_cache = true
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-tools"
base_url = "{upstream}/v1"
upstream_model = "mock-tools"
capabilities = ["tools"]
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-vision"
base_url = "{upstream}/v1"
upstream_model = "mock"
capabilities = ["image_input"]

[[models]]
id = "mock-stops"
base_url = "{upstream}/v1"
upstream_model = "mock-stops"
tokenizer = "upstream"

[[models]]
id = "mock-reason"
base_url = "{upstream}/v1"
upstream_model = "mock-reasoning"
tokenizer = "upstream"
thinking = "hybrid"

[[models]]
id = "mock-err400"
base_url = "{upstream}/v1"
upstream_model = "mock-error-400"

[[models]]
id = "mock-err500"
base_url = "{upstream}/v1"
upstream_model = "mock-error-500"

[[models]]
id = "mock-drop"
base_url = "{upstream}/v1"
upstream_model = "mock-drop-after-3"
tokenizer = "upstream"

[[models]]
id = "mock-drip"
base_url = "{upstream}/v1"
upstream_model = "mock-drip-0.3"
tokenizer = "upstream"

[[models]]
id = "mock-nousage"
base_url = "{upstream}/v1"
upstream_model = "mock-nousage"
tokenizer = "upstream"

[[models]]
id = "mock-small"
base_url = "{upstream}/v1"
upstream_model = "mock"
context_length = 64
tokenizer = "upstream"

[[models]]
id = "pool"
upstream_model = "mock"
tokenizer = "upstream"
cooldown_s = 30
[[models.deployments]]
name = "pool-dead"
base_url = "http://127.0.0.1:{dead_port}/v1"
[[models.deployments]]
name = "pool-live"
base_url = "{upstream}/v1"

[[models]]
id = "doomed"
upstream_model = "mock"
fallbacks = ["mock-chat"]
[[models.deployments]]
name = "doomed-dead"
base_url = "http://127.0.0.1:{dead_port}/v1"
[[models.deployments]]
name = "doomed-503"
base_url = "{upstream}/v1"
upstream_model = "mock-error-503"

[[models]]
id = "tight"
base_url = "{upstream}/v1"
upstream_model = "mock-sleep-1.5"
max_in_flight = 1
queue_timeout_s = 0.3
"""


@pytest.fixture(scope="package")
def msg_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve` with MESSAGES_TOML."""
    with serving(tmp_path_factory.mktemp("messages"), backend, upstream, MESSAGES_TOML) as srv:
        yield srv


@pytest.fixture()
def msg_key(msg_server: Server) -> str:
    """A fresh application key without limits."""
    return msg_server.create_key()


@pytest.fixture()
def claude(msg_server: Server, msg_key: str) -> Iterator[anthropic.Anthropic]:
    """The official anthropic SDK pointed at the server with `msg_key`."""
    with anthropic.Anthropic(base_url=msg_server.base_url, api_key=msg_key, max_retries=0, timeout=30) as client:
        yield client

"""A server whose catalogue has what the Responses API tests need beside the session's: a model
that calls tools (blocking and streamed), one that reasons, one whose stream breaks, and pools
whose deployments fail (one falls back to another model)."""

from __future__ import annotations

from typing import Iterator

import openai
import pytest

from tests.harness import Backend, Server, Upstream, serving

RESPONSES_TOML = """
[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
context_length = 4096
tokenizer = "upstream"
prefix_cache = true
capabilities = ["tools", "response_format"]
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-tools"
base_url = "{upstream}/v1"
upstream_model = "mock-tools"
capabilities = ["tools"]
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

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
id = "mock-drop"
base_url = "{upstream}/v1"
upstream_model = "mock-drop-after-3"
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
"""


@pytest.fixture(scope="package")
def resp_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve` with RESPONSES_TOML."""
    with serving(tmp_path_factory.mktemp("responses"), backend, upstream, RESPONSES_TOML) as srv:
        yield srv


@pytest.fixture()
def resp_key(resp_server: Server) -> str:
    """A fresh application key without limits."""
    return resp_server.create_key()


@pytest.fixture()
def client(resp_server: Server, resp_key: str) -> Iterator[openai.OpenAI]:
    """The official openai SDK pointed at the server with `resp_key`."""
    with openai.OpenAI(base_url=resp_server.v1, api_key=resp_key, max_retries=0, timeout=30) as sdk:
        yield sdk

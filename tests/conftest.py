"""Starts the real pieces: a fake upstream engine and `inferd serve`, on loopback.

The database is SQLite in a temporary data dir, unless INFERD_DATABASE_URL names a PostgreSQL
server: then a fresh database is created on it for this run (and dropped after). When
INFERD_REDIS_URL is set the server shares limits through that Redis under a fresh prefix.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import openai
import pytest

from tests.harness import (IDP_TABLE, Backend, Server, Upstream, pg_create_database, pg_drop_database, serving,
                           write_config)

MODELS_TOML = """
[[models]]
id = "mock-chat"
type = "chat"
engine = "openai"
base_url = "{upstream}/v1"
upstream_model = "mock"
context_length = 4096
aliases = ["fast", "chat-alias"]
capabilities = ["tools", "response_format"]
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}
model_full_name = "Mock Chat"
description = "The fake upstream"
use_when = "testing"
model_icon_url = "icons/mock.svg"
owned_by = "acme"
prefix_cache = true
timeout_s = 5

[[models]]
id = "mock-plain"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[models]]
id = "mock-reason"
base_url = "{upstream}/v1"
upstream_model = "mock-reasoning"
capabilities = ["reasoning_effort"]
tokenizer = "upstream"
thinking = "hybrid"

[[models]]
id = "mock-always"
base_url = "{upstream}/v1"
upstream_model = "mock"
thinking = "always"
tokenizer = "upstream"

[[models]]
id = "mock-never"
base_url = "{upstream}/v1"
upstream_model = "mock"
thinking = "never"

[[models]]
id = "mock-small"
base_url = "{upstream}/v1"
upstream_model = "mock"
context_length = 64
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-maint"
base_url = "{upstream}/v1"
upstream_model = "mock"
maintenance = true

[[models]]
id = "mock-slow"
base_url = "{upstream}/v1"
upstream_model = "mock-sleep-3"
timeout_s = 1

[[models]]
id = "mock-stall"
base_url = "{upstream}/v1"
upstream_model = "mock-stall-after-3"
tokenizer = "upstream"
timeout_s = 1
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-drop"
base_url = "{upstream}/v1"
upstream_model = "mock-drop-after-3"
tokenizer = "upstream"

[[models]]
id = "mock-drip"
base_url = "{upstream}/v1"
upstream_model = "mock-drip-0.2"
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-err400"
base_url = "{upstream}/v1"
upstream_model = "mock-error-400"

[[models]]
id = "mock-err500"
base_url = "{upstream}/v1"
upstream_model = "mock-error-500"

[[models]]
id = "mock-nousage"
base_url = "{upstream}/v1"
upstream_model = "mock-nousage"
tokenizer = "upstream"

[[models]]
id = "mock-dead"
base_url = "http://127.0.0.1:{dead_port}/v1"
upstream_model = "mock"

[[models]]
id = "mock-hf"
base_url = "{upstream}/v1"
upstream_model = "mock"
tokenizer = "hf:{tokenizer}"
context_length = 2048

[[models]]
id = "mock-params"
base_url = "{upstream}/v1"
upstream_model = "mock"
capabilities = ["tools"]
supported_parameters = ["temperature", "max_tokens"]

[[models]]
id = "mock-embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock"
aliases = ["embed-alias"]
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-embed-broken"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock-error-400"

[[models]]
id = "mock-rerank"
type = "reranker"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-tts"
type = "tts"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 10.0, output_per_m_token = 0.0 }}

[[models]]
id = "mock-asr"
type = "asr"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[models]]
id = "mock-image"
type = "image-gen"
base_url = "{upstream}/v1"
upstream_model = "mock"
aliases = ["t2i"]
cost = {{ input_per_m_token = 0.0, output_per_m_token = 0.0, image_per_generation = 0.04 }}

[[models]]
id = "mock-rerank-logits"
type = "reranker"
base_url = "{upstream}/v1"
upstream_model = "mock-logits"
"""


@pytest.fixture(scope="session")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """The database and Redis this run uses."""
    url = os.environ.get("INFERD_DATABASE_URL")
    redis_url = os.environ.get("INFERD_REDIS_URL") or None
    prefix = f"inferd:test:{uuid.uuid4().hex[:8]}:"
    if url and url.startswith("postgres"):
        name = f"inferd_test_{uuid.uuid4().hex[:10]}"
        database_url = pg_create_database(url, name)
        try:
            yield Backend(database_url, redis_url, prefix)
        finally:
            pg_drop_database(url, name)
    else:
        data = tmp_path_factory.mktemp("db")
        yield Backend(f"sqlite:///{data / 'inferd.db'}", redis_url, prefix)


@pytest.fixture(scope="session")
def upstream() -> Iterator[Upstream]:
    """The fake upstream engine, on a free loopback port."""
    fake = Upstream.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="session")
def config_file(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Path:
    """The catalogue every session server uses."""
    return write_config(tmp_path_factory.mktemp("config") / "inferd.toml", MODELS_TOML, upstream)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, config_file: Path) -> Iterator[Server]:
    """`inferd serve` on loopback with the test catalogue."""
    srv = Server.start(tmp_path_factory.mktemp("data"), backend, config_file)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def app_key(server: Server) -> str:
    """A fresh application key without limits."""
    return server.create_key()


@pytest.fixture()
def sdk(server: Server, app_key: str) -> Iterator[openai.OpenAI]:
    """The official openai SDK pointed at the server with `app_key` (closed after the test)."""
    with openai.OpenAI(base_url=server.v1, api_key=app_key, max_retries=0, timeout=30) as client:
        yield client



MOCK_CHAT_TOML = """
[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
"""


@pytest.fixture(scope="session")
def idp_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """A server verifying HS256 idp tokens (harness.IDP_TABLE; `harness.idp_token` signs them)."""
    with serving(tmp_path_factory.mktemp("idp-hs"), backend, upstream, IDP_TABLE + MOCK_CHAT_TOML) as srv:
        yield srv


@pytest.fixture(scope="session")
def builtin(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Iterator[Server]:
    """`inferd serve` with no configuration file: the built-in catalogue."""
    srv = Server.start(tmp_path_factory.mktemp("builtin"), backend, None)
    try:
        yield srv
    finally:
        srv.stop()



@pytest.fixture(scope="module")
def builtin_key(builtin: Server) -> str:
    """An application key on the built-in server, one per test module, so its usage rows are its own."""
    return builtin.create_key()


@pytest.fixture(scope="module")
def builtin_sdk(builtin: Server, builtin_key: str) -> Iterator[openai.OpenAI]:
    """The openai SDK pointed at the built-in server with `builtin_key`."""
    with openai.OpenAI(base_url=builtin.v1, api_key=builtin_key, max_retries=0, timeout=120) as client:
        yield client

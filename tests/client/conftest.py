"""Fixtures of the client tests: the scripted fake server, inferd_client pointed at the real server,
and a server running the batch worker for the batch helpers and `inferd batch`."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from inferd_client import Client, RetryPolicy
from tests.client.scripted import ScriptedServer, iter_server
from tests.harness import Server, Upstream, own_backend, pg_drop_database, write_config


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedServer]:
    """A scripted HTTP server standing in for a misbehaving inferd."""
    yield from iter_server()


@pytest.fixture()
def sleeps() -> list[float]:
    """Where the retry policy's injected sleep records its waits."""
    return []


@pytest.fixture()
def client(server: Server, app_key: str) -> Iterator[Client]:
    """inferd_client on the real server with a fresh application key (retries do not really sleep)."""
    with Client(server.base_url, app_key, timeout=30, retry=RetryPolicy(sleep=lambda s: None)) as c:
        yield c


IDP_SECRET = "client-test-hs256-secret-" + "0123456789abcdef" * 4
IDP_ISSUER, IDP_AUDIENCE = "https://idp.client.test", "inferd"

BATCH_TOML = """
[idp]
issuer = "https://idp.client.test"
audience = "inferd"
hs256_secret = "@SECRET@"

[conversations]
embedding_model = "mock-embed"
default_chat_model = "mock-chat"

[batches]
window_seconds = 600
retention_seconds = 600
max_concurrency = 4

[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-slow"
base_url = "{upstream}/v1"
upstream_model = "mock-sleep-2"
timeout_s = 10

[[models]]
id = "mock-err400"
base_url = "{upstream}/v1"
upstream_model = "mock-error-400"

[[models]]
id = "mock-stall"
base_url = "{upstream}/v1"
upstream_model = "mock-stall-after-3"
timeout_s = 1

[[models]]
id = "mock-embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock"
"""


@pytest.fixture(scope="session")
def client_server(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve` with its batch worker, on a database of its own (no other worker sees its batches),
    verifying HS256 idp tokens and serving conversations: the server of the extension routes' tests."""
    folder = tmp_path_factory.mktemp("client-batch")
    config = write_config(folder / "inferd.toml", BATCH_TOML.replace("@SECRET@", IDP_SECRET), upstream)
    backend, pg_name = own_backend(folder, "client")
    (folder / "data").mkdir()
    srv = Server.start(folder / "data", backend, config, batch_worker=True)
    try:
        yield srv
    finally:
        srv.stop()
        if pg_name:
            pg_drop_database(os.environ["INFERD_DATABASE_URL"], pg_name)


@pytest.fixture()
def batch_key(client_server: Server) -> str:
    """A fresh application key (in a fresh org) on the batch server."""
    return client_server.create_key()


@pytest.fixture()
def batch_client(client_server: Server, batch_key: str) -> Iterator[Client]:
    """inferd_client on the batch server."""
    with Client(client_server.base_url, batch_key, timeout=30, retry=RetryPolicy(sleep=lambda s: None)) as c:
        yield c

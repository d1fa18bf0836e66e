"""Fixtures of the client tests: the scripted fake server, and inferd_client pointed at the real one."""

from __future__ import annotations

from typing import Iterator

import pytest

from inferd_client import Client, RetryPolicy
from tests.client.scripted import ScriptedServer, iter_server
from tests.harness import Server


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

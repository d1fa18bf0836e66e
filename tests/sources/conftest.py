"""Servers for the source tests: the built-in embedder with a short ephemeral ttl, and one whose
embedding model is an HTTP upstream on a dead port. Helpers to upload and to read stored chunks."""

from __future__ import annotations

import asyncio
import socket
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import httpx
import pytest
from sqlalchemy import select

from tests.harness import Backend, Server, Upstream, auth, write_config

EPHEMERAL_TTL_SECONDS = 3

SOURCES_TOML = """
[[models]]
id = "all-minilm-l6-v2"
builtin = true

[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"

[conversations]
embedding_model = "all-minilm-l6-v2"
ephemeral_ttl_seconds = %d
""" % EPHEMERAL_TTL_SECONDS

DEAD_EMBEDDER_TOML = """
[[models]]
id = "dead-embed"
type = "embeddings"
engine = "openai"
base_url = "http://127.0.0.1:{dead_port}/v1"
timeout_s = 5

[conversations]
embedding_model = "dead-embed"
"""


@pytest.fixture(scope="session")
def sources_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve` embedding with the built-in all-minilm-l6-v2, ephemeral ttl of a few seconds."""
    folder = tmp_path_factory.mktemp("sources")
    config = write_config(folder / "inferd.toml", SOURCES_TOML, upstream)
    srv = Server.start(folder, backend, config)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def dead_embedder_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend,
                         upstream: Upstream) -> Iterator[Server]:
    """A server whose `[conversations] embedding_model` is an openai-engine model nobody serves: its
    port stays bound (never listening) by this process, so no other server can take it meanwhile."""
    folder = tmp_path_factory.mktemp("dead-embedder")
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        config = folder / "inferd.toml"
        config.write_text(DEAD_EMBEDDER_TOML.format(dead_port=dead.getsockname()[1]), encoding="utf-8")
        srv = Server.start(folder, backend, config)
        try:
            yield srv
        finally:
            srv.stop()


@dataclass
class User:
    """An end user: their user key, the application key that minted it, their email."""

    key: str
    app_key: str
    email: str
    server: Server

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header."""
        return auth(self.key)


def new_user(server: Server, app_key: str | None = None) -> User:
    """A user key for a fresh user (in a fresh org unless `app_key` names one)."""
    app_key = app_key or server.create_key()
    email = f"u-{uuid.uuid4().hex[:10]}@example.test"
    return User(server.create_user_key(app_key, email=email), app_key, email, server)


@pytest.fixture()
def alice(sources_server: Server) -> User:
    """A fresh user in a fresh org."""
    return new_user(sources_server)


def upload(user: User, filename: str, data: bytes, conversation_id: int | str = 0, ephemeral: bool | None = None,
           timeout: float = 60) -> httpx.Response:
    """POST /v1/conversations/{id}/files/vectorize with one `file` part."""
    params = {} if ephemeral is None else {"ephemeral": "true" if ephemeral else "false"}
    return httpx.post(f"{user.server.v1}/conversations/{conversation_id}/files/vectorize", headers=user.headers,
                      params=params, files={"file": (filename, data)}, timeout=timeout)


def stored_chunks(server: Server, source_id: int) -> list[dict[str, Any]]:
    """The stored chunks of a source, in order, read with the project's own tables."""
    from inferd.store.tables import source_chunks

    async def work(engine: Any) -> list[dict[str, Any]]:
        async with engine.connect() as conn:
            rows = await conn.execute(select(source_chunks).where(source_chunks.c.source_id == source_id)
                                      .order_by(source_chunks.c.ordinal))
            return [dict(r) for r in rows.mappings()]

    return list(asyncio.run(server._with_db(work)))


def count_rows(server: Server, table_name: str, **where: Any) -> int:
    """How many rows of a table match the column values."""
    from inferd.store import tables

    table = getattr(tables, table_name)

    async def work(engine: Any) -> int:
        async with engine.connect() as conn:
            query = select(table)
            for column, value in where.items():
                query = query.where(table.c[column] == value)
            return len((await conn.execute(query)).all())

    return int(asyncio.run(server._with_db(work)))

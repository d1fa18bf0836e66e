"""End users for the conversation tests: user keys minted through the exchange (shape B)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import httpx
import pytest

from inferd.store.conversations import ConversationRepository, NewMessage
from inferd.store.db import create_engine
from tests.harness import Backend, Server, Upstream, auth, serving


@dataclass
class EndUser:
    """A user of an org with a minted user key, talking to the server over HTTP."""

    server: Server
    email: str
    key: str
    user_id: int
    org: str = ""
    owned_key: str = ""  # the long-lived key the user key was minted from (charged for its calls)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(self.server.v1 + path, headers=auth(self.key), params=params, timeout=30)

    def post(self, path: str, body: Any) -> httpx.Response:
        return httpx.post(self.server.v1 + path, headers=auth(self.key), json=body, timeout=30)

    def patch(self, path: str, body: Any) -> httpx.Response:
        return httpx.patch(self.server.v1 + path, headers=auth(self.key), json=body, timeout=30)

    def create(self, **body: Any) -> dict[str, Any]:
        response = self.post("/conversations", body)
        assert response.status_code == 201, response.text
        return dict(response.json()["conversation"])

    def say(self, conversation_id: int, text: str, parent: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"message": text}
        if parent is not None:
            body["parent_message_id"] = parent
        response = self.post(f"/conversations/{conversation_id}/messages", body)
        assert response.status_code == 201, response.text
        return dict(response.json()["message"])

    def detail(self, conversation_id: int, **params: Any) -> dict[str, Any]:
        response = self.get(f"/conversations/{conversation_id}", **params)
        assert response.status_code == 200, response.text
        return dict(response.json()["conversation"])


def mint_user(server: Server, org: str, email: str | None = None) -> EndUser:
    """A user key for `email` in `org`, minted from a key the user owns (exchange shape B)."""
    email = email or f"{uuid.uuid4().hex[:10]}@example.test"
    owned = server.create_key(org=org, user_email=email)
    response = httpx.post(server.v1 + "/auth/exchange", json={"api_key": owned})
    assert response.status_code == 200, response.text
    return EndUser(server, email, response.json()["user_key"], int(server.key_row(owned)["user_id"]), org, owned)


@pytest.fixture()
def org() -> str:
    """A fresh org slug."""
    return f"org-{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def make_user(server: Server, org: str) -> Callable[..., EndUser]:
    """Mint users of the test's org (or another org when named)."""

    def make(email: str | None = None, in_org: str | None = None) -> EndUser:
        return mint_user(server, in_org or org, email)

    return make


def write_rows(server: Server, conversation_id: int, rows: list[NewMessage]) -> list[dict[str, Any]]:
    """Append rows the way the generate turn does (assistant and tool rows have no HTTP route)."""

    async def work() -> list[dict[str, Any]]:
        engine = create_engine(server.backend.database_url)
        try:
            return await ConversationRepository(engine).append(conversation_id, rows)
        finally:
            await engine.dispose()

    return list(asyncio.run(work()))


def count_rows(server: Server, table: str, conversation_id: int) -> int:
    """How many rows of a conversation table still name this conversation."""
    from sqlalchemy import func, select

    from inferd.store import tables

    async def work() -> int:
        engine = create_engine(server.backend.database_url)
        try:
            target = tables.metadata.tables[table]
            async with engine.connect() as conn:
                return int((await conn.execute(select(func.count()).select_from(target).where(
                    target.c.conversation_id == conversation_id))).scalar_one())
        finally:
            await engine.dispose()

    return int(asyncio.run(work()))


GENERATE_TOML = """
[conversations]
embedding_model = "mock-embed"
default_chat_model = "mock-chat"
max_tool_steps = 2

[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
capabilities = ["tools"]
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-agent"
base_url = "{upstream}/v1"
upstream_model = "mock-agent"
capabilities = ["tools"]
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-agent-loop"
base_url = "{upstream}/v1"
upstream_model = "mock-agent-loop"
capabilities = ["tools"]
tokenizer = "upstream"

[[models]]
id = "mock-agent-drop"
base_url = "{upstream}/v1"
upstream_model = "mock-agent-drop"
capabilities = ["tools"]
tokenizer = "upstream"

[[models]]
id = "mock-grounded"
base_url = "{upstream}/v1"
upstream_model = "mock-grounded"
capabilities = ["tools"]
tokenizer = "upstream"

[[models]]
id = "mock-grounded-plain"
base_url = "{upstream}/v1"
upstream_model = "mock-grounded-plain"
tokenizer = "upstream"

[[models]]
id = "mock-grounded-retry"
base_url = "{upstream}/v1"
upstream_model = "mock-grounded-retry"
tokenizer = "upstream"

[[models]]
id = "mock-reason"
base_url = "{upstream}/v1"
upstream_model = "mock-reasoning"
tokenizer = "upstream"
thinking = "hybrid"

[[models]]
id = "mock-drip"
base_url = "{upstream}/v1"
upstream_model = "mock-drip-0.3"
tokenizer = "upstream"

[[models]]
id = "mock-dead"
base_url = "http://127.0.0.1:{dead_port}/v1"
upstream_model = "mock"

[[models]]
id = "mock-embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock"
"""


@pytest.fixture(scope="session")
def gen_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """A server whose `[conversations]` table embeds with the fake upstream and allows two tool steps."""
    with serving(tmp_path_factory.mktemp("generate"), backend, upstream, GENERATE_TOML) as srv:
        yield srv

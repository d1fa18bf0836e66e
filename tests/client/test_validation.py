"""What the spec asks the client to check locally is refused before any request is sent."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from inferd_client import AsyncClient, Client, ClientValidationError
from tests.client.scripted import ScriptedServer

REFUSED: list[tuple[str, Callable[[Client], Any]]] = [
    ("purpose", lambda c: c.create_file(b"{}\n", purpose="fine-tune")),
    ("endpoint", lambda c: c.create_batch("file_1", endpoint="/v1/embeddings")),
    ("window", lambda c: c.create_batch("file_1", completion_window="48h")),
    ("metadata pairs", lambda c: c.create_batch("file_1", metadata={str(i): "v" for i in range(17)})),
    ("metadata key", lambda c: c.create_batch("file_1", metadata={"k" * 65: "v"})),
    ("metadata value", lambda c: c.create_batch("file_1", metadata={"k": "v" * 513})),
    ("metadata type", lambda c: c.create_batch("file_1", metadata={"k": 1})),  # type: ignore[dict-item]
    ("empty file id", lambda c: c.create_batch("")),
    ("limit 0", lambda c: c.list_batches_page(limit=0)),
    ("limit 101", lambda c: c.list_batches_page(limit=101)),
    ("limit bool", lambda c: c.list_batches_page(limit=True)),
    ("iterator limit", lambda c: c.list_batches(limit=500)),
    ("empty batch id", lambda c: c.get_batch("")),
    ("exchange both", lambda c: c.exchange(idp_token="t", api_key="k")),
    ("exchange none", lambda c: c.exchange()),
    ("delete none", lambda c: c.delete_conversations([])),
    ("chat metadata", lambda c: c.chat("m", [{"role": "user", "content": "x"}], metadata={"k": "v" * 600})),
]


@pytest.mark.parametrize(("what", "call"), REFUSED, ids=[w for w, _ in REFUSED])
def test_refused_locally(scripted: ScriptedServer, what: str, call: Callable[[Client], Any]) -> None:
    scripted.answer()
    with Client(scripted.url, "k") as client, pytest.raises(ClientValidationError) as raised:
        call(client)
    assert isinstance(raised.value, ValueError)  # callers may catch it as a ValueError
    assert scripted.seen == []


def test_async_client_refuses_locally_too(scripted: ScriptedServer) -> None:
    scripted.answer()

    async def go() -> None:
        async with AsyncClient(scripted.url, "k") as client:
            with pytest.raises(ClientValidationError):
                await client.create_file(b"{}", purpose="assistants")
            with pytest.raises(ClientValidationError):
                client.list_batches(limit=0)
            with pytest.raises(ClientValidationError):
                await client.create_batch("file_1", completion_window="1h")

    asyncio.run(go())
    assert scripted.seen == []


def test_limits_at_the_edges_are_sent(scripted: ScriptedServer) -> None:
    scripted.answer()
    with Client(scripted.url + "/v1/", "k") as client:  # a trailing /v1 is accepted
        client.list_batches_page(limit=1)
        client.list_batches_page(limit=100, after="batch_9")
        client.create_batch("file_1", metadata={str(i): "v" * 512 for i in range(16)})
    assert [s.path for s in scripted.seen] == ["/v1/batches?limit=1", "/v1/batches?limit=100&after=batch_9",
                                               "/v1/batches"]


def test_ids_cannot_change_the_route(scripted: ScriptedServer) -> None:
    scripted.answer()
    with Client(scripted.url, "k") as client:
        client.get_batch("../files/x")
        client.get_conversation("a/b?c")
    assert [s.path for s in scripted.seen] == ["/v1/batches/..%2Ffiles%2Fx", "/v1/conversations/a%2Fb%3Fc"]


def test_base_url_and_key_default_from_the_environment(scripted: ScriptedServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    scripted.answer()
    monkeypatch.setenv("INFERD_BASE_URL", scripted.url + "/v1")
    monkeypatch.setenv("INFERD_API_KEY", "IFDKENV:secret")
    with Client() as client:
        assert client.base_url == scripted.url
        client.models()
        client.with_api_key("IFDKUSER:other").list_sources()
    assert [s.headers["Authorization"] for s in scripted.seen] == ["Bearer IFDKENV:secret", "Bearer IFDKUSER:other"]
    assert all(s.headers["User-Agent"].startswith("inferd-client/") for s in scripted.seen)

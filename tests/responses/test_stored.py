"""Stored responses: `store` (default true) keeps a response for its key, GET and DELETE read and
remove it, `previous_response_id` continues from it (earlier input and output first), and another
key's id is 404 everywhere."""

from __future__ import annotations

import uuid

import httpx
import openai
import pytest

from tests.fakes.upstream import REPLY_WORDS
from tests.harness import Server, Upstream, auth

REPLY = " ".join(REPLY_WORDS)


def test_stored_by_default_and_retrieved_as_sent(client: openai.OpenAI, resp_server: Server, resp_key: str) -> None:
    created = client.responses.create(model="mock-chat", input="Say hello", metadata={"k": "v"})
    fetched = client.responses.retrieve(created.id)
    assert fetched.model_dump() == created.model_dump()
    raw = httpx.get(f"{resp_server.v1}/responses/{created.id}", headers=auth(resp_key))
    assert raw.status_code == 200 and raw.json()["store"] is True and raw.json()["object"] == "response"
    assert len(resp_server.usage_rows(resp_key)) == 1  # reading a stored response is free


@pytest.mark.parametrize("stream", [False, True])
def test_store_false_is_not_kept(client: openai.OpenAI, stream: bool) -> None:
    if stream:
        with client.responses.stream(model="mock-chat", input="Say hello", store=False) as events:
            created = events.get_final_response()
    else:
        created = client.responses.create(model="mock-chat", input="Say hello", store=False)
    assert created.output_text == REPLY
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve(created.id)
    assert caught.value.body["type"] == "not_found_error"  # type: ignore[index]


def test_previous_response_id_continues_the_conversation(client: openai.OpenAI, upstream: Upstream) -> None:
    first = client.responses.create(model="mock-chat", input="My name is Ada.", instructions="Be brief.")
    second = client.responses.create(model="mock-chat", input="What is my name?", previous_response_id=first.id)
    assert upstream.last_chat_body()["messages"] == [  # the earlier instructions are not carried over
        {"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": REPLY},
        {"role": "user", "content": "What is my name?"}]
    with client.responses.stream(model="mock-chat", input=[{"role": "user", "content": "And again?"}],
                                 previous_response_id=second.id, instructions="Answer in French.") as events:
        third = events.get_final_response()
    assert upstream.last_chat_body()["messages"] == [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": REPLY},
        {"role": "user", "content": "What is my name?"}, {"role": "assistant", "content": REPLY},
        {"role": "user", "content": "And again?"}]
    assert third.previous_response_id == second.id
    assert client.responses.retrieve(third.id).previous_response_id == second.id


def test_delete(client: openai.OpenAI, resp_server: Server, resp_key: str) -> None:
    created = client.responses.create(model="mock-chat", input="Say hello")
    deleted = httpx.delete(f"{resp_server.v1}/responses/{created.id}", headers=auth(resp_key))
    assert deleted.status_code == 200
    assert deleted.json() == {"id": created.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="mock-chat", input="Hi", previous_response_id=created.id)
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    second = client.responses.create(model="mock-chat", input="Say hello")
    client.responses.delete(second.id)  # the SDK's own call
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)


def test_another_keys_response_is_404(resp_server: Server) -> None:
    org = f"org-{uuid.uuid4().hex[:8]}"
    own, other = resp_server.create_key(org=org), resp_server.create_key(org=org)  # the same org, even
    with openai.OpenAI(base_url=resp_server.v1, api_key=own, max_retries=0, timeout=30) as owner, \
            openai.OpenAI(base_url=resp_server.v1, api_key=other, max_retries=0, timeout=30) as stranger:
        created = owner.responses.create(model="mock-chat", input="Say hello")
        for attempt in (lambda: stranger.responses.retrieve(created.id),
                        lambda: stranger.responses.delete(created.id),
                        lambda: stranger.responses.create(model="mock-chat", input="Hi",
                                                          previous_response_id=created.id)):
            with pytest.raises(openai.NotFoundError) as caught:
                attempt()
            assert caught.value.status_code == 404
            assert caught.value.body["type"] == "not_found_error"  # type: ignore[index]
        assert resp_server.usage_rows(other) == []  # refused before the engine
        assert owner.responses.retrieve(created.id).id == created.id  # still there for its own key


def test_get_and_delete_need_a_key(resp_server: Server) -> None:
    for method in ("GET", "DELETE"):
        reply = httpx.request(method, f"{resp_server.v1}/responses/resp_nope")
        assert reply.status_code == 401 and reply.json()["error"]["type"] == "authentication_error"


def test_saved_while_another_writer_holds_the_database(client: openai.OpenAI, resp_server: Server) -> None:
    """SQLite: another connection holds the write lock for 6 s (longer than a default 5 s busy
    timeout); the reply waits for it (on a thread, never the loop) and is stored, not failed."""
    import sqlite3
    import threading

    url = resp_server.backend.database_url
    if not url.startswith("sqlite"):
        pytest.skip("the SQLite write lock")
    blocker = sqlite3.connect(url.split(":///", 1)[1], isolation_level=None, timeout=30)
    outcome: dict[str, object] = {}

    def ask() -> None:
        try:
            outcome["response"] = client.responses.create(model="mock-chat", input="while locked")
        except Exception as exc:  # reported below
            outcome["error"] = exc

    blocker.execute("BEGIN IMMEDIATE")
    try:
        caller = threading.Thread(target=ask)
        caller.start()
        caller.join(6.0)
        assert caller.is_alive(), "the reply should wait for the lock"
    finally:
        blocker.execute("COMMIT")
        blocker.close()
    caller.join(30)
    assert "error" not in outcome, outcome.get("error")
    response = outcome["response"]
    assert client.responses.retrieve(response.id).output_text == response.output_text  # type: ignore[attr-defined]

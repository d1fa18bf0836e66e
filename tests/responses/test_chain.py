"""A stored response keeps its own turn and points at the one it continued: a long conversation
stores rows of a flat size, and a continuation still sends the whole conversation upstream, oldest
first. Every link must be the key's own; a deleted response that others continue stays part of
their conversations (it is hidden, and goes with the last of them); rows stored whole (before
migration 0011, or once a chain is `CHAIN_LIMIT` long) start a conversation. Rows are read and
seeded in the real database; nothing of inferd is mocked."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import func, select, update

from inferd.store.db import utcnow
from inferd.store.responses import CHAIN_LIMIT, RETENTION, ResponseRepository, StoredResponse
from inferd.store.tables import responses
from tests.fakes.upstream import REPLY_WORDS
from tests.harness import Backend, on_database, Server, Upstream, auth

REPLY = " ".join(REPLY_WORDS)


def _rows(backend: Backend, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The stored rows by id, with `bytes`: the size of what each holds."""
    async def work(engine: Any) -> dict[str, dict[str, Any]]:
        size = (func.length(responses.c.input_items) + func.length(responses.c.response)).label("bytes")
        async with engine.connect() as conn:
            found = await conn.execute(select(responses, size).where(responses.c.id.in_(ids)))
            return {row["id"]: dict(row) for row in found.mappings()}

    return dict(on_database(backend, work))


def _turns(*texts: str) -> list[dict[str, Any]]:
    """The chat messages of a conversation whose user turns are `texts`, each answered."""
    messages: list[dict[str, Any]] = []
    for text in texts:
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": REPLY}]
    return messages


def test_thirty_turns_store_flat_rows_and_send_the_whole_conversation(
        client: openai.OpenAI, resp_server: Server, resp_key: str, upstream: Upstream) -> None:
    ids: list[str] = []
    for turn in range(1, 31):
        created = client.responses.create(model="mock-chat", input=f"Turn {turn}",
                                          previous_response_id=ids[-1] if ids else None)
        assert created.output_text == REPLY
        ids.append(created.id)
    texts = [f"Turn {turn}" for turn in range(1, 31)]
    assert upstream.last_chat_body()["messages"] == [*_turns(*texts[:-1]), {"role": "user", "content": "Turn 30"}]
    rows = _rows(resp_server.backend, ids)
    # Each row holds its own turn: the 30th is the 2nd's size (give or take the digits of its token
    # counts), where a row holding every turn before it would be about 28 turns larger.
    assert rows[ids[29]]["bytes"] <= rows[ids[1]]["bytes"] + 32, (rows[ids[1]]["bytes"], rows[ids[29]]["bytes"])
    assert [rows[i]["previous_id"] for i in ids] == [None, *ids[:-1]]
    # The stored object is what the create answered, and a streamed continuation reads the same chain.
    assert client.responses.retrieve(ids[29]).model_dump() == created.model_dump()
    fetched = httpx.get(f"{resp_server.v1}/responses/{ids[29]}", headers=auth(resp_key)).json()
    assert fetched["object"] == "response" and fetched["previous_response_id"] == ids[28]
    assert fetched["output"][0]["content"][0]["text"] == REPLY and fetched["usage"]["total_tokens"] > 0
    with client.responses.stream(model="mock-chat", input="Turn 31", previous_response_id=ids[29]) as events:
        last = events.get_final_response()
    assert upstream.last_chat_body()["messages"] == [*_turns(*texts), {"role": "user", "content": "Turn 31"}]
    assert _rows(resp_server.backend, [last.id])[last.id]["previous_id"] == ids[29]


def test_a_row_stored_whole_before_the_chain_still_continues(client: openai.OpenAI, resp_server: Server,
                                                            resp_key: str, upstream: Upstream) -> None:
    """A row of the old shape (the whole conversation in its input items, no previous id) is where
    a walk starts, and the turns that continue it are chained to it."""
    old_id = f"resp_{uuid.uuid4().hex}"
    whole = [{"type": "message", "role": "user", "content": "First"},
             {"type": "message", "role": "assistant", "content": "Earlier answer"},
             {"type": "message", "role": "user", "content": "Second"}]
    response = {"id": old_id, "object": "response", "status": "completed", "model": "mock-chat",
                "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "Old reply", "annotations": []}]}]}

    async def seed(engine: Any) -> None:
        store = ResponseRepository(engine)
        await store.save(StoredResponse(old_id, resp_key.split(":")[0], whole, response))
        await store.close()

    on_database(resp_server.backend, seed)
    assert client.responses.retrieve(old_id).output_text == "Old reply"
    third = client.responses.create(model="mock-chat", input="Third", previous_response_id=old_id)
    fourth = client.responses.create(model="mock-chat", input="Fourth", previous_response_id=third.id)
    assert fourth.output_text == REPLY
    assert upstream.last_chat_body()["messages"] == [
        {"role": "user", "content": "First"}, {"role": "assistant", "content": "Earlier answer"},
        {"role": "user", "content": "Second"}, {"role": "assistant", "content": "Old reply"},
        *_turns("Third"), {"role": "user", "content": "Fourth"}]


def test_a_deleted_response_stays_in_the_conversations_that_continue_it(
        client: openai.OpenAI, resp_server: Server, resp_key: str, upstream: Upstream) -> None:
    a = client.responses.create(model="mock-chat", input="A")
    b = client.responses.create(model="mock-chat", input="B", previous_response_id=a.id)
    c = client.responses.create(model="mock-chat", input="C", previous_response_id=b.id)
    client.responses.delete(b.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(b.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(b.id)
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="mock-chat", input="x", previous_response_id=b.id)
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    # C's conversation still holds B's turn: what a client holding C's id expects.
    client.responses.create(model="mock-chat", input="D", previous_response_id=c.id, store=False)
    assert upstream.last_chat_body()["messages"] == [*_turns("A", "B", "C"), {"role": "user", "content": "D"}]
    rows = _rows(resp_server.backend, [a.id, b.id, c.id])
    assert rows[b.id]["deleted_at"] is not None and rows[a.id]["deleted_at"] is None
    # Deleting C, the last response that continued B, removes B's row with it; A stays as it was.
    client.responses.delete(c.id)
    assert set(_rows(resp_server.backend, [a.id, b.id, c.id])) == {a.id}
    client.responses.create(model="mock-chat", input="E", previous_response_id=a.id, store=False)
    assert upstream.last_chat_body()["messages"] == [*_turns("A"), {"role": "user", "content": "E"}]
    # A response nothing continues is deleted outright.
    client.responses.delete(a.id)
    assert _rows(resp_server.backend, [a.id]) == {}


def test_every_link_of_the_chain_must_be_the_keys_own(client: openai.OpenAI, resp_server: Server,
                                                      resp_key: str) -> None:
    first = client.responses.create(model="mock-chat", input="One")
    second = client.responses.create(model="mock-chat", input="Two", previous_response_id=first.id)
    stranger = resp_server.create_key().split(":")[0]

    async def hand_over(engine: Any) -> None:  # the first turn now belongs to another key
        async with engine.begin() as conn:
            await conn.execute(update(responses).where(responses.c.id == first.id).values(key_id=stranger))

    on_database(resp_server.backend, hand_over)
    assert client.responses.retrieve(second.id).id == second.id  # the response itself is still the key's
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="mock-chat", input="Three", previous_response_id=second.id)
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert caught.value.body["code"] == "response_not_found"  # type: ignore[index]


def test_a_chain_at_the_limit_is_stored_whole(client: openai.OpenAI, resp_server: Server, resp_key: str,
                                              upstream: Upstream) -> None:
    """A continuation of a chain of `CHAIN_LIMIT` rows keeps the whole conversation and no previous
    id, so no walk ever reads more than `CHAIN_LIMIT` rows; the conversation goes on unchanged."""
    key_id = resp_key.split(":")[0]
    ids = [f"resp_{uuid.uuid4().hex}" for _ in range(CHAIN_LIMIT)]

    def reply(text: str, response_id: str) -> dict[str, Any]:
        return {"id": response_id, "object": "response", "output": [
            {"id": "msg_x", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": text, "annotations": []}]}]}

    async def seed(engine: Any) -> None:
        store = ResponseRepository(engine)
        for n, response_id in enumerate(ids):
            await store.save(StoredResponse(response_id, key_id, [{"type": "message", "role": "user",
                                                                   "content": f"q{n}"}],
                                            reply(f"a{n}", response_id), ids[n - 1] if n else None))
        await store.close()

    on_database(resp_server.backend, seed)
    earlier: list[dict[str, Any]] = []
    for n in range(CHAIN_LIMIT):
        earlier += [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]
    whole = client.responses.create(model="mock-chat", input="next", previous_response_id=ids[-1])
    assert upstream.last_chat_body()["messages"] == [*earlier, {"role": "user", "content": "next"}]
    row = _rows(resp_server.backend, [whole.id])[whole.id]
    assert row["previous_id"] is None and len(row["input_items"]) > 2 * CHAIN_LIMIT * 20
    assert whole.previous_response_id == ids[-1]  # the object still says what it continued
    client.responses.create(model="mock-chat", input="after", previous_response_id=whole.id, store=False)
    assert upstream.last_chat_body()["messages"] == [*earlier, *_turns("next"), {"role": "user", "content": "after"}]


def test_retention_keeps_an_expired_turn_while_a_younger_one_continues_it(backend: Backend) -> None:
    key_id = f"K{uuid.uuid4().hex[:12]}"
    a, b, c = (f"resp_{uuid.uuid4().hex}" for _ in range(3))

    def stored(response_id: str, previous: str | None) -> StoredResponse:
        return StoredResponse(response_id, key_id, [{"type": "message", "role": "user", "content": response_id}],
                              {"id": response_id, "object": "response", "output": []}, previous)

    async def age(engine: Any, response_id: str, days: int) -> None:
        async with engine.begin() as conn:
            await conn.execute(update(responses).where(responses.c.id == response_id)
                               .values(created_at=utcnow() - timedelta(days=days)))

    async def work(engine: Any) -> None:
        store = ResponseRepository(engine)
        for response_id, previous in ((a, None), (b, a), (c, b)):
            await store.save(stored(response_id, previous))
        await store.close()
        await age(engine, a, 40)
        await age(engine, b, 35)
        await store.delete_older(utcnow() - RETENTION)
        assert await store.get(a, key_id) is None and await store.get(b, key_id) is None  # unseen
        chain = await store.chain(c, key_id)
        assert [row.id for row in chain] == [c, b, a] and chain[-1].previous_id is None  # still whole
        await age(engine, c, 31)
        assert await store.delete_older(utcnow() - RETENTION) == 3  # the newest first, then the rest
        assert await store.chain(c, key_id) == []

    on_database(backend, work)

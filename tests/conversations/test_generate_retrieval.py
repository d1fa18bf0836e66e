"""Retrieve first: a generate turn over a conversation with sources searches them before the first
model call, whatever the model does with tools; the passages reach the prompt, are stored with the
turn and streamed, and the answer's citations point at the passage it quotes (fake upstream)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conversations.conftest import EndUser, mint_user
from tests.conversations.test_generate import frames_of, generate, upload
from tests.fakes.upstream import REPLY_WORDS
from tests.harness import Server, Upstream, auth

MISSION = ("Field notes. The secret launch code of the Pelican mission is AMBER-7731, kept in the blue safe. "
           "The crew trains at the Harrow base every Thursday.")
BAKERY = ("Bakery ledger. The Moonlit Bakery bakes 240 loaves of rye bread each morning. Its oven runs at "
          "230 degrees. The head baker is Ilse Marrow.")


@pytest.fixture()
def alice(gen_server: Server) -> EndUser:
    return mint_user(gen_server, f"org-rag-{time.monotonic_ns()}")


def frames_of_type(frames: list[Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if isinstance(f, dict) and f.get("type") == kind]


def answer_of(frames: list[Any]) -> str:
    return "".join(f["chunk"] for f in frames if isinstance(f, dict) and "chunk" in f and "type" not in f)


def upstream_chats(upstream: Upstream, model: str) -> list[dict[str, Any]]:
    return [r["body"] for r in upstream.requests() if r["path"] == "/v1/chat/completions"
            and r["body"]["model"] == model]


def source_ids(user: EndUser, cid: int) -> dict[str, int]:
    listed = httpx.get(f"{user.server.v1}/conversations/{cid}/sources", headers=auth(user.key), timeout=30)
    assert listed.status_code == 200, listed.text
    return {row["source_name"]: row["id"] for row in listed.json()["body"]}


def test_a_model_that_never_calls_tools_answers_from_retrieved_passages(gen_server: Server, upstream: Upstream,
                                                                         alice: EndUser) -> None:
    cid = alice.create()["id"]
    upload(alice, cid, MISSION, "mission.txt")
    upload(alice, cid, BAKERY, "bakery.txt")
    question = alice.say(cid, "What is the launch code of the Pelican mission?")
    response = generate(alice, cid, question["id"], "mock-chat")  # upstream `mock` never calls a tool
    assert response.status_code == 200, response.text
    frames = frames_of(response)
    assert frames[0] == {"conversation_id": cid, "title": None} and frames[-1] == "[DONE]"
    kinds = [f.get("type", "chunk") for f in frames[1:-1]]
    assert kinds.index("sources") < kinds.index("retrieval") < kinds.index("chunk") < kinds.index("message")
    assert "tool_call" not in kinds
    [retrieved] = frames_of_type(frames, "retrieval")
    assert retrieved["tool_status"] == "ok" and retrieved["query"] == question["message"]
    # (The fake embedder's vectors are arbitrary: the order of the passages is not what is tested here.)
    [best] = [p for p in retrieved["passages"] if p["source_name"] == "mission.txt"]
    assert "AMBER-7731" in best["text"] and [p["index"] for p in retrieved["passages"]] == list(
        range(1, len(retrieved["passages"]) + 1))
    assert best["source_id"] == source_ids(alice, cid)["mission.txt"]
    assert isinstance(best["chunk_id"], int) and best["char_start"] == 0 and best["char_end"] == len(MISSION)
    # The passages reached the prompt of the first model call, headed by their file, before the
    # question; no tools.
    # (Found by its question: the fake keeps only its last 200 chat requests, so counting before and
    # after is not reliable on a busy shared upstream.)
    first = [chat for chat in upstream_chats(upstream, "mock")
             if "Question: " + question["message"] in str(chat["messages"][-1].get("content"))][-1]
    assert "tools" not in first and first["temperature"] == 0.2  # copy the passages, do not vary them
    assert first["messages"][0]["role"] == "system" and "documents" in first["messages"][0]["content"]
    prompt = first["messages"][-1]["content"]
    assert first["messages"][-1]["role"] == "user"
    assert "From mission.txt:\n" in prompt and "AMBER-7731" in prompt
    assert prompt.index("Question: " + question["message"]) < prompt.index("AMBER-7731") < prompt.rindex(
        "Question: " + question["message"])
    # Stored with the turn: a search_sources tool row holding what the model read, then the answer.
    rows = alice.detail(cid)["messages"]
    assert [(m["role"], m["finish_reason"]) for m in rows] == [("user", None), ("tool", None), ("assistant", "stop")]
    tool_row, final = rows[1], rows[2]
    assert tool_row["tool_name"] == "search_sources" and tool_row["tool_status"] == "ok"
    assert tool_row["tool_call_id"] == retrieved["tool_call_id"] and tool_row["id"] == retrieved["message_id"]
    assert "AMBER-7731" in tool_row["message"] and tool_row["turn_id"] == final["turn_id"]
    stored = tool_row["metadata"]["retrieval"]
    assert stored["queries"] == [question["message"]]
    assert [p["chunk_id"] for p in stored["passages"]] == [p["chunk_id"] for p in retrieved["passages"]]
    assert final["message"] == answer_of(frames) and "citations" in final["metadata"]
    # Billed: the query and the passages' pieces embedded (two calls), then the model, in `conversations`.
    billed = [r for r in gen_server.usage_rows(alice.owned_key) if r["workspace"] == "conversations"]
    assert sum(1 for r in billed if r["model"] == "mock-embed") == 4  # two uploads, the query, the pieces
    assert any(r["model"] == "mock-chat" and r["status_code"] == 200 for r in billed)


@pytest.mark.parametrize("model", ["mock-grounded", "mock-grounded-plain"])
def test_citations_point_at_the_quoted_passage(upstream: Upstream, alice: EndUser, model: str) -> None:
    cid = alice.create(title="ledger")["id"]
    upload(alice, cid, MISSION, "mission.txt")
    upload(alice, cid, BAKERY, "bakery.txt")
    question = alice.say(cid, "How many loaves of rye bread does the Moonlit Bakery bake each morning?")
    frames = frames_of(generate(alice, cid, question["id"], model))
    answer = answer_of(frames)
    assert "240 loaves" in answer  # the fake answers with the passage's best sentence
    [message] = frames_of_type(frames, "message")
    [citation] = message["citations"]  # by the [n] marker, or (plain) by the answer's own words
    assert citation["source_name"] == "bakery.txt" and citation["source_id"] == source_ids(alice, cid)["bakery.txt"]
    [retrieved] = frames_of_type(frames, "retrieval")
    assert citation["chunk_id"] == retrieved["passages"][citation["index"] - 1]["chunk_id"]
    quoted = [BAKERY[start:end] for start, end in citation["spans"]]
    assert any("240 loaves of rye bread" in piece for piece in quoted), quoted
    final = alice.detail(cid)["messages"][-1]
    assert final["metadata"]["citations"] == message["citations"]


def test_a_follow_up_folds_in_the_exchange_before_it(upstream: Upstream, alice: EndUser) -> None:
    cid = alice.create(title="follow")["id"]
    upload(alice, cid, MISSION, "mission.txt")
    first = alice.say(cid, "What is the launch code of the Pelican mission?")
    frames_of(generate(alice, cid, first["id"], "mock-chat"))
    reply = alice.detail(cid)["messages"][-1]
    follow = alice.say(cid, "And where is it kept?", parent=reply["id"])
    frames = frames_of(generate(alice, cid, follow["id"], "mock-chat"))
    [retrieved] = frames_of_type(frames, "retrieval")
    assert any("blue safe" in p["text"] for p in retrieved["passages"])
    tool_row = [m for m in alice.detail(cid)["messages"] if m["role"] == "tool"][-1]
    queries = tool_row["metadata"]["retrieval"]["queries"]
    assert queries[0] == follow["message"]
    assert first["message"] in queries[1] and queries[1].endswith(follow["message"])
    # The earlier turn's retrieval row answers no call of the model's, so it is not sent upstream.
    last = upstream_chats(upstream, "mock")[-1]
    assert [m["role"] for m in last["messages"]] == ["system", "user", "assistant", "user"]
    assert last["messages"][1]["content"] == first["message"]


def test_an_answer_not_drawn_from_the_passages_is_asked_again(upstream: Upstream, alice: EndUser) -> None:
    cid = alice.create(title="retry")["id"]
    upload(alice, cid, MISSION, "mission.txt")
    upload(alice, cid, BAKERY, "bakery.txt")
    question = alice.say(cid, "What is the launch code of the Pelican mission?")
    # The fake first restates the question (nothing the passages hold), then answers from them.
    frames = frames_of(generate(alice, cid, question["id"], "mock-grounded-retry"))
    answer = answer_of(frames)
    assert "AMBER-7731" in answer and question["message"] not in answer  # the first answer was held back
    kinds = [f.get("type", "chunk") for f in frames[1:-1]]
    retrievals = frames_of_type(frames, "retrieval")
    assert len(retrievals) == 2 and kinds.index("chunk") > len(kinds) - 1 - kinds[::-1].index("retrieval")
    # The model named what to search for next; that search is a second tool row of the turn.
    chats = [chat for chat in upstream_chats(upstream, "mock-grounded-retry")
             if question["message"] in str(chat["messages"][1].get("content"))]
    asked_next = [chat for chat in chats if "searched for next" in str(chat["messages"][-1]["content"])][-1]
    assert not asked_next.get("stream") and asked_next["max_tokens"] <= 32
    assert asked_next["messages"][-2] == {"role": "assistant", "content": question["message"]}
    assert retrievals[1]["query"] == " ".join(REPLY_WORDS)  # what the fake answers a blocking call
    # Asked again afresh (not shown its first answer), to copy the line that answers.
    again = [chat for chat in chats if "Copy from the passages" in str(chat["messages"][-1]["content"])][-1]
    assert [m["role"] for m in again["messages"]] == ["system", "user"]
    assert "AMBER-7731" in again["messages"][-1]["content"]
    rows = alice.detail(cid)["messages"]
    assert [row["tool_name"] for row in rows if row["role"] == "tool"] == ["search_sources", "search_sources"]
    final = rows[-1]
    check = final["metadata"]["answer_check"]
    assert check["problem"] == "nothing new" and check["answer"] == "second"
    assert check["first"] == question["message"] and check["query"] == retrievals[1]["query"]
    assert final["message"] == answer and final["metadata"]["citations"]


def test_an_answer_drawn_from_the_passages_is_sent_as_it_is(upstream: Upstream, alice: EndUser) -> None:
    cid = alice.create(title="no retry")["id"]
    upload(alice, cid, BAKERY, "bakery.txt")
    question = alice.say(cid, "How many loaves of rye bread does the Moonlit Bakery bake each morning?")
    frames = frames_of(generate(alice, cid, question["id"], "mock-grounded"))
    assert "240 loaves" in answer_of(frames) and len(frames_of_type(frames, "retrieval")) == 1
    final = alice.detail(cid)["messages"][-1]
    assert "answer_check" not in final["metadata"]

"""POST /v1/conversations/{id}/generate over the fake upstream: the agentic loop, rows, billing, errors."""

from __future__ import annotations

import time
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from tests.conversations.conftest import EndUser, mint_user
from tests.fakes.upstream import fake_embedding
from tests.harness import Server, Upstream, auth

DOCUMENT = "Field notes. The secret launch code of the Pelican mission is AMBER-7731, kept in the blue safe."


def frames_of(response: httpx.Response) -> list[Any]:
    """The SSE frames of a finished generate response: JSON objects, or the string "[DONE]"."""
    frames: list[Any] = []
    for block in response.text.split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            frames.append(data if data == "[DONE]" else orjson.loads(data))
    return frames


def generate(user: EndUser, cid: int, message_id: int | None, model: str = "mock-agent", *,
             body: Any = None, **query: str) -> httpx.Response:
    payload = body if body is not None else {"conversation_id": cid, "message_id": message_id}
    return httpx.post(f"{user.server.v1}/conversations/{cid}/generate", params={"model": model, **query},
                      headers=auth(user.key), json=payload, timeout=60)


def upload(user: EndUser, cid: int, text: str, name: str = "notes.txt") -> None:
    response = httpx.post(f"{user.server.v1}/conversations/{cid}/files/vectorize", headers=auth(user.key),
                          files={"file": (name, text.encode(), "text/plain")}, timeout=60)
    assert response.status_code == 201, response.text


@pytest.fixture()
def alice(gen_server: Server) -> EndUser:
    return mint_user(gen_server, f"org-gen-{time.monotonic_ns()}")


def parent_key(user: EndUser) -> str:
    """The owned key the user's key was minted from (its usage rows are charged there)."""
    return user.owned_key


def unrelated_message(text: str) -> str:
    """A greeting whose fake embedding is far from `text`'s and which shares no word with it: retrieval
    finds nothing for it, so a model with tools is offered the search tool."""
    vector = np.asarray(fake_embedding(text))
    for candidate in ("hello", "hello there", "hi!", "good morning", "hey you", "greetings", "howdy"):
        other = np.asarray(fake_embedding(candidate))
        if float(vector @ other / np.linalg.norm(vector) / np.linalg.norm(other)) < 0.1:
            return candidate
    raise AssertionError("no candidate is far enough")


def test_a_model_may_still_search_when_retrieval_finds_nothing(gen_server: Server, upstream: Upstream,
                                                                alice: EndUser) -> None:
    cid = alice.create()["id"]
    upload(alice, cid, DOCUMENT)
    question = alice.say(cid, unrelated_message(DOCUMENT))
    response = generate(alice, cid, question["id"])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = frames_of(response)
    assert frames[0] == {"conversation_id": cid, "title": None}
    assert frames[-1] == "[DONE]"
    kinds = [f.get("type") for f in frames[1:-1]]
    assert kinds.index("sources") < kinds.index("retrieval") < kinds.index("tool_call") < kinds.index(
        "tool_result") < kinds.index("title")
    assert next(f for f in frames if isinstance(f, dict) and f.get("type") == "retrieval")["passages"] == []
    call = next(f for f in frames if isinstance(f, dict) and f.get("type") == "tool_call")
    assert call["tool_name"] == "search_sources" and orjson.loads(call["arguments"])["query"] == question["message"]
    # The model was offered the tool at each step (its search found nothing either), then answered.
    chats = [r["body"] for r in upstream.requests() if r["path"] == "/v1/chat/completions"
             and r["body"]["model"] == "mock-agent"][-2:]
    assert [bool(c.get("tools")) for c in chats] == [True, True]
    assert chats[1]["messages"][-1]["role"] == "tool" and "No passages" in chats[1]["messages"][-1]["content"]
    assert all(m["role"] != "tool" for m in chats[0]["messages"])  # the retrieval row is not a model's call

    detail = alice.detail(cid)
    rows = detail["messages"]
    assert [(m["role"], m["finish_reason"]) for m in rows] == [
        ("user", None), ("tool", None), ("assistant", "tool_calls"), ("tool", None), ("assistant", "stop")]
    user_row, retrieval_row, call_row, tool_row = rows[:4]
    final = rows[-1]
    assert retrieval_row["parent_message_id"] == question["id"] and call_row["parent_message_id"] == retrieval_row["id"]
    assert "tool_calls" not in call_row
    assert tool_row["tool_name"] == "search_sources" and tool_row["tool_status"] == "ok"
    assert tool_row["tool_call_id"] == call["tool_call_id"]
    assert final["message"] == "".join(f["chunk"] for f in frames if isinstance(f, dict) and "chunk" in f
                                       and "type" not in f) and final["model_name"] == "mock-agent"
    assert len({m["turn_id"] for m in rows[1:]}) == 1 and final["turn_id"]
    assert user_row["turn_id"] is None
    # Untitled conversations get a title from default_chat_model.
    title = next(f for f in frames if isinstance(f, dict) and f.get("type") == "title")["title"]
    assert title and detail["title"] == title
    # Billed through the chat corridor in workspace `conversations`, to the parent key, for this user.
    rows_billed = [r for r in gen_server.usage_rows(parent_key(alice)) if r["workspace"] == "conversations"]
    chat_rows = [r for r in rows_billed if r["model"] in ("mock-agent", "mock-chat")]
    assert [r["model"] for r in chat_rows] == ["mock-agent", "mock-agent", "mock-chat"]
    assert all(r["status_code"] == 200 and r["cost_usd"] > 0 and r["user_id"] == str(alice.user_id)
               for r in chat_rows)
    # The upload, the retrieval's query, the model's search (nothing found: no pieces embedded).
    assert sum(1 for r in rows_billed if r["model"] == "mock-embed") == 3


def test_without_sources_no_tool_is_offered(upstream: Upstream, alice: EndUser) -> None:
    cid = alice.create(title="kept")["id"]
    question = alice.say(cid, "hello")
    frames = frames_of(generate(alice, cid, question["id"]))
    assert frames[0] == {"conversation_id": cid, "title": "kept"} and frames[-1] == "[DONE]"
    assert not any(isinstance(f, dict) and f.get("type") in ("sources", "retrieval", "tool_call", "title")
                   for f in frames)
    last = [r["body"] for r in upstream.requests() if r["path"] == "/v1/chat/completions"][-1]
    assert "tools" not in last and "temperature" not in last and last["messages"][0]["role"] == "system"
    assert last["messages"][-1] == {"role": "user", "content": "hello"}
    rows = alice.detail(cid)["messages"]
    assert [m["role"] for m in rows] == ["user", "assistant"] and rows[1]["finish_reason"] == "stop"
    assert rows[1]["metadata"] == {}  # no citations without passages
    assert alice.detail(cid)["title"] == "kept"
    # A follow-up turn sends the branch so far.
    follow = alice.say(cid, "and then?")
    generate(alice, cid, follow["id"])
    last = [r["body"] for r in upstream.requests() if r["path"] == "/v1/chat/completions"][-1]
    assert [m["role"] for m in last["messages"]] == ["system", "user", "assistant", "user"]


def test_tool_steps_are_capped(alice: EndUser) -> None:
    cid = alice.create(title="loop")["id"]
    upload(alice, cid, DOCUMENT)
    question = alice.say(cid, unrelated_message(DOCUMENT))
    frames = frames_of(generate(alice, cid, question["id"], "mock-agent-loop"))
    assert frames[-1] == "[DONE]"
    assert sum(1 for f in frames if isinstance(f, dict) and f.get("type") == "tool_call") == 2
    rows = alice.detail(cid)["messages"]
    assert [m["tool_status"] for m in rows if m["role"] == "tool"] == ["ok", "error", "error"]  # empty queries
    assert [(m["role"], m["finish_reason"]) for m in rows] == [
        ("user", None), ("tool", None), ("assistant", "tool_calls"), ("tool", None), ("assistant", "tool_calls"),
        ("tool", None), ("assistant", "stop")]


def test_engine_failure_mid_turn_keeps_rows_and_bills(gen_server: Server, alice: EndUser) -> None:
    cid = alice.create(title="drop")["id"]
    upload(alice, cid, DOCUMENT)
    question = alice.say(cid, "What is the code?")
    response = generate(alice, cid, question["id"], "mock-agent-drop")
    assert response.status_code == 200
    frames = frames_of(response)
    assert "[DONE]" not in frames
    error = frames[-1]["error"]
    assert set(error) >= {"message", "type", "code"} and error["type"] == "engine_error"
    assert [f["chunk"] for f in frames if isinstance(f, dict) and "chunk" in f and "type" not in f] == ["This", " is"]
    rows = alice.detail(cid)["messages"]
    # The retrieval row was written before the model ran; the broken answer is not stored.
    assert [(m["role"], m["tool_name"]) for m in rows] == [("user", None), ("tool", "search_sources")]
    billed = [r for r in gen_server.usage_rows(parent_key(alice)) if r["model"] == "mock-agent-drop"]
    assert [r["status_code"] >= 500 for r in billed] == [True]
    assert billed[0]["completion_tokens"] == 2  # what ran is billed


def test_unreachable_engine_is_an_error_frame(alice: EndUser) -> None:
    cid = alice.create(title="dead")["id"]
    question = alice.say(cid, "anyone?")
    frames = frames_of(generate(alice, cid, question["id"], "mock-dead"))
    assert frames[0]["conversation_id"] == cid
    assert frames[-1]["error"]["type"] == "engine_error" and frames[-1]["error"]["code"]
    assert [m["role"] for m in alice.detail(cid)["messages"]] == ["user"]


def test_thinking_and_reasoning(upstream: Upstream, alice: EndUser) -> None:
    cid = alice.create(title="think")["id"]
    question = alice.say(cid, "think about it")
    frames = frames_of(generate(alice, cid, question["id"], "mock-reason"))
    assert any(isinstance(f, dict) and f.get("type") == "reasoning" for f in frames)
    last = [r["body"] for r in upstream.requests() if r["path"] == "/v1/chat/completions"][-1]
    assert "reasoning_effort" not in last
    assert alice.detail(cid)["messages"][-1]["reasoning_content"] == "thinking"
    again = alice.say(cid, "quickly now")
    generate(alice, cid, again["id"], "mock-reason", thinking="false")
    last = [r["body"] for r in upstream.requests() if r["path"] == "/v1/chat/completions"][-1]
    assert last["reasoning_effort"] == "off"


def test_multipart_body_and_validation(alice: EndUser, gen_server: Server) -> None:
    cid = alice.create(title="checks")["id"]
    question = alice.say(cid, "hi")
    url = f"{gen_server.v1}/conversations/{cid}/generate"
    multipart = httpx.post(url, params={"model": "mock-chat"}, headers=auth(alice.key),
                           files={"message_id": (None, str(question["id"])), "conversation_id": (None, str(cid))})
    assert multipart.status_code == 200 and frames_of(multipart)[-1] == "[DONE]"
    other = alice.create()["id"]
    elsewhere = alice.say(other, "elsewhere")
    assistant = alice.detail(cid)["messages"][-1]
    assert assistant["role"] == "assistant"
    cases: list[tuple[dict[str, Any], Any, int]] = [
        ({}, {"message_id": question["id"]}, 400),                                       # no model
        ({"model": ""}, {"message_id": question["id"]}, 400),
        ({"model": "mock-chat"}, {}, 400),                                                # no message_id
        ({"model": "mock-chat"}, {"message_id": "x"}, 400),
        ({"model": "mock-chat"}, {"message_id": question["id"], "conversation_id": other}, 400),  # mismatch
        ({"model": "mock-chat", "thinking": "maybe"}, {"message_id": question["id"]}, 400),
        ({"model": "mock-chat", "webSearch": "yes"}, {"message_id": question["id"]}, 400),
        ({"model": "mock-chat"}, {"message_id": elsewhere["id"]}, 404),                   # another conversation
        ({"model": "mock-chat"}, {"message_id": assistant["id"]}, 404),                   # not a user message
        ({"model": "no-such-model"}, {"message_id": question["id"]}, 404),
        ({"model": "mock-embed"}, {"message_id": question["id"]}, 400),                   # not a chat model
    ]
    for query, body, status in cases:
        response = httpx.post(url, params=query, headers=auth(alice.key), json=body)
        assert response.status_code == status, (query, body, response.text)
        assert response.json()["success"] is False and response.json()["message"]
    malformed = httpx.post(url, params={"model": "mock-chat"}, headers={**auth(alice.key),
                                                                         "content-type": "application/json"},
                           content=b"{oops")
    assert malformed.status_code == 400 and malformed.json()["success"] is False


def test_other_users_and_key_types(alice: EndUser, gen_server: Server) -> None:
    cid = alice.create(title="mine")["id"]
    question = alice.say(cid, "private")
    bob = mint_user(gen_server, f"org-gen-{time.monotonic_ns()}")
    same_org_bob = mint_user(gen_server, alice.org)
    for stranger in (bob, same_org_bob):
        response = generate(stranger, cid, question["id"], "mock-chat")
        assert response.status_code == 404 and response.json()["code"] == "conversation_not_found"
    # Shared with Bob: he may generate, but only for his own messages.
    alice.post(f"/conversations/{cid}/participants", {"email": same_org_bob.email, "role": "member"})
    assert generate(same_org_bob, cid, question["id"], "mock-chat").status_code == 404
    his = same_org_bob.say(cid, "my question")
    assert frames_of(generate(same_org_bob, cid, his["id"], "mock-chat"))[-1] == "[DONE]"
    app_key = gen_server.create_key()
    refused = httpx.post(f"{gen_server.v1}/conversations/{cid}/generate", params={"model": "mock-chat"},
                         headers=auth(app_key), json={"message_id": question["id"]})
    assert refused.status_code == 403 and refused.json()["code"] == "user_key_required"


def test_client_disconnect_stops_the_turn(gen_server: Server, upstream: Upstream, alice: EndUser) -> None:
    cid = alice.create(title="leave")["id"]
    question = alice.say(cid, "talk slowly")
    with httpx.stream("POST", f"{gen_server.v1}/conversations/{cid}/generate", params={"model": "mock-drip"},
                      headers=auth(alice.key), json={"message_id": question["id"]}, timeout=30) as response:
        seen = 0
        for line in response.iter_lines():
            if line.startswith("data: ") and '"chunk"' in line:
                seen += 1
                if seen == 2:
                    break
    deadline = time.monotonic() + 15
    billed: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        billed = [r for r in gen_server.usage_rows(parent_key(alice)) if r["model"] == "mock-drip"]
        if billed and any(a["model"] == "mock-drip-0.3" for a in upstream.aborts()):
            break
        time.sleep(0.2)
    assert billed and billed[0]["status_code"] == 499 and billed[0]["workspace"] == "conversations"
    assert any(a["model"] == "mock-drip-0.3" for a in upstream.aborts())
    assert [m["role"] for m in alice.detail(cid)["messages"]] == ["user"]

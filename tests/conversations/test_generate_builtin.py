"""A generate turn with the built-in Qwen model over an uploaded document (the built-in embedder too)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.conversations.conftest import mint_user
from tests.conversations.test_generate import frames_of
from tests.harness import Server, auth

DOCUMENT = """Quarterly operations memo for the Harbor Lights warehouse.

The new loading dock opened on March 3. Forklift inspections happen every Tuesday.
The access code for the north gate of the Harbor Lights warehouse is 58213.
Night shifts end at 6 in the morning. Visitors sign in at the front office.
"""


@pytest.mark.timeout(300)  # two real model calls on a shared CPU (usually a few seconds, over 60 s under load)
def test_builtin_model_answers_from_the_document(builtin: Server) -> None:
    user = mint_user(builtin, f"org-{uuid.uuid4().hex[:8]}")
    cid = user.create()["id"]
    uploaded = httpx.post(f"{builtin.v1}/conversations/{cid}/files/vectorize", headers=auth(user.key),
                          files={"file": ("memo.txt", DOCUMENT.encode(), "text/plain")}, timeout=120)
    assert uploaded.status_code == 201, uploaded.text
    source_id = uploaded.json()["source"]["id"]
    question = user.say(cid, "What is the access code for the north gate of the Harbor Lights warehouse?")
    response = httpx.post(f"{builtin.v1}/conversations/{cid}/generate", params={"model": "fast"},
                          headers=auth(user.key), json={"conversation_id": cid, "message_id": question["id"]},
                          timeout=280)
    assert response.status_code == 200, response.text
    frames = frames_of(response)
    assert frames[-1] == "[DONE]", frames[-3:]
    # Retrieved before the model ran, whatever the model would have done with tools.
    retrieved = next(f for f in frames if isinstance(f, dict) and f.get("type") == "retrieval")
    assert any("58213" in passage["text"] for passage in retrieved["passages"])
    answer = "".join(f["chunk"] for f in frames if isinstance(f, dict) and "chunk" in f and "type" not in f)
    assert "58213" in answer, answer
    [message] = [f for f in frames if isinstance(f, dict) and f.get("type") == "message"]
    assert message["citations"] and all(c["source_id"] == source_id for c in message["citations"])
    detail = user.detail(cid)
    roles = [(m["role"], m["finish_reason"]) for m in detail["messages"]]
    # One tool row of retrieval (two when the answer check asked again: the second search's).
    assert roles in ([("user", None), ("tool", None), ("assistant", "stop")],
                     [("user", None), ("tool", None), ("tool", None), ("assistant", "stop")])
    tool_row = detail["messages"][1]
    assert tool_row["tool_name"] == "search_sources" and tool_row["tool_status"] == "ok"
    assert "58213" in tool_row["message"]
    assert "58213" in detail["messages"][-1]["message"]
    assert detail["messages"][-1]["metadata"]["citations"] == message["citations"]
    assert len({m["turn_id"] for m in detail["messages"][1:]}) == 1
    assert detail["title"]  # titled with default_chat_model (the built-in model too)
    assert detail["sources"] and detail["sources"][0]["source_name"] == "memo.txt"

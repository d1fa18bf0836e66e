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


@pytest.mark.timeout(300)  # three real model calls on a shared CPU (usually about 5 s, over 80 s under load)
def test_builtin_model_answers_from_the_document(builtin: Server) -> None:
    user = mint_user(builtin, f"org-{uuid.uuid4().hex[:8]}")
    cid = user.create()["id"]
    uploaded = httpx.post(f"{builtin.v1}/conversations/{cid}/files/vectorize", headers=auth(user.key),
                          files={"file": ("memo.txt", DOCUMENT.encode(), "text/plain")}, timeout=120)
    assert uploaded.status_code == 201, uploaded.text
    question = user.say(cid, "What is the access code for the north gate of the Harbor Lights warehouse? "
                             "Search my documents.")
    response = httpx.post(f"{builtin.v1}/conversations/{cid}/generate", params={"model": "fast"},
                          headers=auth(user.key), json={"conversation_id": cid, "message_id": question["id"]},
                          timeout=280)
    assert response.status_code == 200, response.text
    frames = frames_of(response)
    assert frames[-1] == "[DONE]", frames[-3:]
    assert any(isinstance(f, dict) and f.get("type") == "tool_call" and f["tool_name"] == "search_sources"
               for f in frames)
    answer = "".join(f["chunk"] for f in frames if isinstance(f, dict) and "chunk" in f and "type" not in f)
    assert "58213" in answer, answer
    detail = user.detail(cid)
    roles = [(m["role"], m["finish_reason"]) for m in detail["messages"]]
    assert roles[0] == ("user", None) and roles[-1] == ("assistant", "stop")
    assert ("tool", None) in roles and ("assistant", "tool_calls") in roles
    tool_rows = [m for m in detail["messages"] if m["role"] == "tool"]
    assert all(m["tool_name"] == "search_sources" and m["tool_status"] == "ok" for m in tool_rows)
    assert "58213" in tool_rows[0]["message"]
    assert "58213" in detail["messages"][-1]["message"]
    assert len({m["turn_id"] for m in detail["messages"][1:]}) == 1
    assert detail["title"]  # titled with default_chat_model (the built-in model too)
    assert detail["sources"] and detail["sources"][0]["source_name"] == "memo.txt"

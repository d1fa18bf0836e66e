"""Conversations over HTTP: create, list (filters, order, latest message, types), detail paging, ids, patch."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from inferd.store.conversations import NewMessage
from tests.conversations.conftest import EndUser, write_rows


def test_create_and_list_embed_the_latest_message(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    created = alice.create(title="Plans", project_id=7)
    assert created["title"] == "Plans" and created["project_id"] == 7 and created["user_id"] == alice.user_id
    assert created["cloud_agent_task_id"] is None and created["archived_at"] is None
    assert created["is_ephemeral"] is False and created["source_count"] == 0
    listing = alice.get("/conversations").json()
    assert listing["success"] is True
    [item] = listing["body"]
    assert item["id"] == created["id"] and item["messages"] == []
    first = alice.say(created["id"], "first")
    second = alice.say(created["id"], "second")
    assert second["parent_message_id"] == first["id"]
    [item] = alice.get("/conversations").json()["body"]
    assert item["messages"] == [{"id": second["id"], "conversation_id": created["id"], "message": "second",
                                 "role": "user", "created_at": second["created_at"]}]
    assert item["last_message_at"] == second["created_at"]
    for field in ("id", "user_id", "title", "project_id", "cloud_agent_task_id", "archived_at", "last_message_at",
                  "created_at", "is_ephemeral", "source_count", "type"):
        assert field in item


def test_list_filters_order_and_types(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    plain = alice.create(title="plain")
    in_project = alice.create(title="project", project_id=42)
    agent = alice.create(title="agent", cloud_agent_task_id=9)
    archived = alice.create(title="archived")
    assert alice.patch(f"/conversations/{archived['id']}", {"archived": True}).status_code == 200

    def ids(**params: Any) -> list[int]:
        response = alice.get("/conversations", **params)
        assert response.status_code == 200, response.text
        return [c["id"] for c in response.json()["body"]]

    assert ids() == [in_project["id"], plain["id"]]  # newest first, no agents, no archived
    alice.say(plain["id"], "bump")  # a new message makes it the newest
    assert ids() == [plain["id"], in_project["id"]]
    assert ids(project_id="42") == [in_project["id"]]
    assert ids(project_id="none") == [plain["id"]]
    assert ids(project_id="43") == []
    assert ids(cloud_agents="true") == [agent["id"]]
    assert ids(archived="true") == [archived["id"]]
    assert alice.get("/conversations", cloud_agents="true").json()["total"]["types"] == ["cloud_agent"]
    assert alice.get("/conversations").json()["total"]["types"] == ["chat"]
    assert alice.patch(f"/conversations/{archived['id']}", {"archived": False}).json()["conversation"][
        "archived_at"] is None
    assert archived["id"] in ids()
    for params in ({"project_id": "abc"}, {"cloud_agents": "yes"}, {"archived": "1"}):
        response = alice.get("/conversations", **params)
        assert response.status_code == 400
        assert response.json()["success"] is False and response.json()["message"]


def test_detail_pages_the_thread(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    conversation = alice.create(title="long")
    sent = [alice.say(conversation["id"], f"m{i}")["id"] for i in range(45)]
    detail = alice.detail(conversation["id"])
    assert [m["id"] for m in detail["messages"]] == sent[-20:]  # newest page, oldest first
    assert detail["has_more"] is True and detail["title"] == "long"
    older = alice.detail(conversation["id"], before_id=sent[-20])
    assert [m["id"] for m in older["messages"]] == sent[5:25]
    oldest = alice.detail(conversation["id"], before_id=sent[5], limit=10)
    assert [m["id"] for m in oldest["messages"]] == sent[:5] and oldest["has_more"] is False
    caught_up = alice.detail(conversation["id"], from_id=sent[40])
    assert [m["id"] for m in caught_up["messages"]] == sent[41:]
    assert alice.detail(conversation["id"], from_id=sent[3], limit=2)["messages"][0]["id"] == sent[4]
    assert len(alice.detail(conversation["id"], limit=500)["messages"]) == 45
    assert len(alice.detail(conversation["id"], limit=1)["messages"]) == 1
    for params in ({"limit": 0}, {"limit": 501}, {"limit": "x"}, {"before_id": "x"}, {"before_id": 0}):
        response = alice.get(f"/conversations/{conversation['id']}", **params)
        assert response.status_code == 400, params
        assert response.json()["success"] is False


def test_detail_fields_reasoning_and_no_tool_calls(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    conversation = alice.create()
    question = alice.say(conversation["id"], "what is in the file?")
    write_rows(alice.server, conversation["id"], [
        NewMessage(role="assistant", message="", user_id=alice.user_id, model_name="mock-chat",
                   finish_reason="tool_calls", turn_id="t1", reasoning_content="I should search",
                   tool_calls=[{"id": "call_1", "type": "function",
                                "function": {"name": "search_sources", "arguments": "{}"}}]),
        NewMessage(role="tool", message="[1] the answer is 42", user_id=alice.user_id, tool_call_id="call_1",
                   tool_name="search_sources", tool_status="ok", turn_id="t1"),
        NewMessage(role="assistant", message="42", user_id=alice.user_id, model_name="mock-chat",
                   finish_reason="stop", turn_id="t1", reasoning_content="found it"),
    ])
    detail = alice.detail(conversation["id"])
    call, tool, answer = detail["messages"][1:]
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert call["parent_message_id"] == question["id"] and call["finish_reason"] == "tool_calls"
    assert call["reasoning_content"] == "I should search" and "tool_calls" not in call
    assert tool["tool_call_id"] == "call_1" and tool["tool_name"] == "search_sources"
    assert tool["tool_status"] == "ok" and tool["finish_reason"] is None
    assert answer["message"] == "42" and answer["reasoning_content"] == "found it"
    assert {m["turn_id"] for m in detail["messages"][1:]} == {"t1"}
    expected = {"id", "conversation_id", "user_id", "message", "reasoning_content", "role", "created_at",
                "is_read", "attachments", "model_name", "tool_call_id", "tool_name", "tool_status",
                "finish_reason", "turn_id", "parent_message_id", "active_sibling_message", "sibling_ids",
                "metadata"}
    assert all(set(m) == expected for m in detail["messages"])
    assert question["attachments"] == [] and question["metadata"] == {} and question["is_read"] is True
    [owner] = detail["participants"]
    assert owner["user_id"] == alice.user_id and owner["role"] == "owner" and owner["email"] == alice.email
    assert set(owner) == {"user_id", "role", "first_name", "last_name", "email", "joined_at"}
    assert detail["sources"] == []


@pytest.mark.parametrize("raw", ["a" * 65, "a.b", "a%20b", "%C3%A9", "a~b"])
def test_bad_path_ids_are_400(make_user: Callable[..., EndUser], raw: str) -> None:
    alice = make_user()
    for response in (alice.get(f"/conversations/{raw}"), alice.post(f"/conversations/{raw}/messages",
                                                                      {"message": "x"}),
                     alice.patch(f"/conversations/{raw}", {"title": "x"})):
        assert response.status_code == 400, response.text
        assert response.json() == {"success": False, "message": response.json()["message"], "code": "invalid_id"}


@pytest.mark.parametrize("raw", ["abc", "a" * 64, "x-y_z", "99999999", "0", "99999999999999999999"])
def test_valid_but_unknown_ids_are_404(make_user: Callable[..., EndUser], raw: str) -> None:
    alice = make_user()
    response = alice.get(f"/conversations/{raw}")
    assert response.status_code == 404, response.text
    assert response.json() == {"success": False, "message": "Conversation not found",
                               "code": "conversation_not_found"}


def test_bodies_are_validated(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    conversation = alice.create()
    for path, body in (("/conversations", {"title": 5}), ("/conversations", {"project_id": "x"}),
                       ("/conversations", {"unknown": 1}), (f"/conversations/{conversation['id']}/messages", {}),
                       (f"/conversations/{conversation['id']}/messages", {"message": ""}),
                       (f"/conversations/{conversation['id']}/participants", {"email": "nobody"}),
                       (f"/conversations/{conversation['id']}/participants",
                        {"email": "a@b.test", "role": "owner"})):
        response = alice.post(path, body)
        assert response.status_code == 400, (path, body, response.text)
        assert response.json()["success"] is False
    response = alice.patch(f"/conversations/{conversation['id']}", {"archived": "yes"})
    assert response.status_code == 400
    missing_parent = alice.post(f"/conversations/{conversation['id']}/messages",
                                {"message": "x", "parent_message_id": 10**9})
    assert missing_parent.status_code == 404 and missing_parent.json()["code"] == "message_not_found"


def test_patch_title_project_archive(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    conversation = alice.create(title="old")
    response = alice.patch(f"/conversations/{conversation['id']}", {"title": "new", "project_id": 3})
    assert response.status_code == 200, response.text
    assert response.json()["conversation"]["title"] == "new"
    detail = alice.detail(conversation["id"])
    assert detail["title"] == "new" and detail["project_id"] == 3 and detail["archived_at"] is None
    alice.patch(f"/conversations/{conversation['id']}", {"archived": True})
    assert alice.detail(conversation["id"])["archived_at"] is not None
    alice.patch(f"/conversations/{conversation['id']}", {"project_id": None})
    assert alice.detail(conversation["id"])["project_id"] is None

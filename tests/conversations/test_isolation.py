"""Who sees what: owners, participants by role, strangers, other orgs, and keys of the wrong type."""

from __future__ import annotations

from typing import Any, Callable

import httpx

from inferd.store.conversations import NewMessage
from tests.conversations.conftest import EndUser, count_rows, write_rows
from tests.harness import Server, auth


def _routes(cid: int) -> list[tuple[str, str, Any]]:
    return [("GET", f"/conversations/{cid}", None), ("POST", f"/conversations/{cid}/messages", {"message": "x"}),
            ("POST", f"/conversations/{cid}/participants", {"email": "x@example.test", "role": "member"}),
            ("PATCH", f"/conversations/{cid}", {"title": "mine now"})]


def _call(user: EndUser, method: str, path: str, body: Any) -> httpx.Response:
    return httpx.request(method, user.server.v1 + path, headers=auth(user.key), json=body, timeout=30)


def test_strangers_learn_nothing(make_user: Callable[..., EndUser], org: str) -> None:
    alice, bob = make_user(), make_user()
    eve = make_user(in_org=org + "-other")
    cid = alice.create(title="secret")["id"]
    alice.say(cid, "private words")
    unknown = 2**31 - 1
    for stranger in (bob, eve):
        assert stranger.get("/conversations").json()["body"] == []
        for (method, path, body), (_, unknown_path, _) in zip(_routes(cid), _routes(unknown)):
            response = _call(stranger, method, path, body)
            never = _call(stranger, method, unknown_path, body)
            assert response.status_code == 404, (method, path)
            # The same answer as for a conversation that does not exist.
            assert response.json() == never.json() == {"success": False, "message": "Conversation not found",
                                                       "code": "conversation_not_found"}
        deleted = stranger.post("/conversations/delete", {"conversation_ids": [cid]})
        assert deleted.status_code == 404 and deleted.json()["success"] is False
    detail = alice.detail(cid)
    assert detail["title"] == "secret" and len(detail["messages"]) == 1


def test_sharing_by_role(make_user: Callable[..., EndUser]) -> None:
    alice, bob, carol, dave = make_user(), make_user(), make_user(), make_user()
    cid = alice.create(title="shared")["id"]
    alice.say(cid, "hello team")
    response = alice.post(f"/conversations/{cid}/participants", {"email": bob.email, "role": "member"})
    assert response.status_code == 201, response.text
    participant = response.json()["participant"]
    assert participant["user_id"] == bob.user_id and participant["role"] == "member"
    assert participant["email"] == bob.email and participant["joined_at"]
    # A member reads and writes, but may not manage.
    assert [c["id"] for c in bob.get("/conversations").json()["body"]] == [cid]
    assert bob.detail(cid)["messages"][0]["message"] == "hello team"
    assert bob.say(cid, "hi from bob")["user_id"] == bob.user_id
    for method, path, body in _routes(cid)[2:]:
        response = _call(bob, method, path, body)
        assert response.status_code == 403 and response.json()["code"] == "not_conversation_admin"
    refused = bob.post("/conversations/delete", {"conversation_ids": [cid]})
    assert refused.status_code == 404
    # An admin manages: shares further, renames, deletes.
    alice.post(f"/conversations/{cid}/participants", {"email": carol.email, "role": "admin"})
    assert carol.post(f"/conversations/{cid}/participants", {"email": dave.email}).status_code == 201
    assert carol.patch(f"/conversations/{cid}", {"title": "renamed"}).status_code == 200
    people = {p["user_id"]: p["role"] for p in alice.detail(cid)["participants"]}
    assert people == {alice.user_id: "owner", bob.user_id: "member", carol.user_id: "admin", dave.user_id: "member"}
    # The owner stays owner whatever role someone tries to give them.
    alice.post(f"/conversations/{cid}/participants", {"email": alice.email, "role": "member"})
    assert {p["user_id"]: p["role"] for p in alice.detail(cid)["participants"]}[alice.user_id] == "owner"
    result = carol.post("/conversations/delete", {"conversation_ids": [cid]})
    assert result.status_code == 200 and result.json()["total"] == {"deleted_ids": [cid], "skipped_ids": []}
    for user in (alice, bob, carol, dave):
        assert user.get(f"/conversations/{cid}").status_code == 404
        assert user.get("/conversations").json()["body"] == []


def test_partial_delete_removes_everything(make_user: Callable[..., EndUser]) -> None:
    alice, bob = make_user(), make_user()
    mine = alice.create(project_id=4)["id"]
    also_mine = alice.create()["id"]
    question = alice.say(mine, "q")
    alice.say(mine, "edit", parent=question["id"])
    write_rows(alice.server, mine, [NewMessage(role="assistant", message="a", user_id=alice.user_id,
                                               tool_calls=[{"id": "c"}])])
    alice.post(f"/conversations/{mine}/participants", {"email": bob.email, "role": "member"})
    theirs = bob.create()["id"]
    assert count_rows(alice.server, "conversation_messages", mine) == 3
    assert count_rows(alice.server, "conversation_participants", mine) == 2
    response = alice.post("/conversations/delete", {"conversation_ids": [mine, str(also_mine), theirs, 10**9]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True and body["message"]
    assert body["total"] == {"deleted_ids": [mine, also_mine], "skipped_ids": [theirs, 10**9]}
    for table in ("conversation_messages", "conversation_participants"):
        assert count_rows(alice.server, table, mine) == 0
    assert alice.get(f"/conversations/{mine}").status_code == 404
    assert bob.detail(theirs)["id"] == theirs  # skipped, untouched
    again = alice.post("/conversations/delete", {"conversation_ids": [mine]})
    assert again.status_code == 404 and again.json()["success"] is False


def test_delete_body_is_validated(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    for body in ({}, {"conversation_ids": []}, {"conversation_ids": ["abc"]}, {"conversation_ids": [True]},
                 {"conversation_ids": [1.5]}, {"conversation_ids": "1"}, {"conversation_ids": [-1]},
                 {"conversation_ids": ["-1"]}, [1]):
        response = alice.post("/conversations/delete", body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["success"] is False and response.json()["message"]


def test_only_user_keys_on_conversation_routes(server: Server, make_user: Callable[..., EndUser], org: str) -> None:
    alice = make_user()
    cid = alice.create()["id"]
    app_key = server.create_key(org=org)
    admin_key = server.create_key(org=org, key_type="admin")
    calls = [("GET", "/conversations", None), ("POST", "/conversations", {}),
             ("POST", "/conversations/delete", {"conversation_ids": [cid]}), *_routes(cid)]
    for key in (app_key, admin_key):
        for method, path, body in calls:
            response = httpx.request(method, server.v1 + path, headers=auth(key), json=body)
            assert response.status_code == 403, (method, path)
            assert response.json() == {"success": False, "message": response.json()["message"],
                                       "code": "user_key_required"}
    missing = httpx.get(server.v1 + "/conversations")
    assert missing.status_code == 401 and missing.json()["success"] is False
    assert alice.detail(cid)["id"] == cid  # nothing was deleted by the refused calls

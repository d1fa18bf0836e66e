"""Branches: a second child of a parent is a new branch and becomes the visible one."""

from __future__ import annotations

from typing import Callable

from tests.conversations.conftest import EndUser


def test_second_child_starts_a_visible_branch(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    cid = alice.create()["id"]
    root = alice.say(cid, "root")
    first = alice.say(cid, "first answer")
    below_first = alice.say(cid, "follow-up on first")
    assert [m["id"] for m in alice.detail(cid)["messages"]] == [root["id"], first["id"], below_first["id"]]

    edited = alice.say(cid, "edited answer", parent=root["id"])
    assert edited["parent_message_id"] == root["id"] and edited["sibling_ids"] == [first["id"], edited["id"]]
    thread = alice.detail(cid)["messages"]
    assert [m["id"] for m in thread] == [root["id"], edited["id"]]
    assert thread[0]["sibling_ids"] == [root["id"]] and thread[0]["parent_message_id"] is None
    assert thread[1]["sibling_ids"] == [first["id"], edited["id"]]
    assert all(m["active_sibling_message"] for m in thread)
    # Without parent_message_id a message goes after the visible leaf, on the new branch.
    after_edit = alice.say(cid, "continues the edit")
    assert after_edit["parent_message_id"] == edited["id"]
    # The list embeds the newest message of the visible branch.
    [item] = alice.get("/conversations").json()["body"]
    assert item["messages"][0]["id"] == after_edit["id"]

    # Answering on the old branch makes it the visible one again, with its whole path.
    back = alice.say(cid, "back on the first branch", parent=below_first["id"])
    assert [m["id"] for m in alice.detail(cid)["messages"]] == [root["id"], first["id"], below_first["id"],
                                                                back["id"]]
    # A third sibling of the root's children.
    third = alice.say(cid, "third answer", parent=root["id"])
    thread = alice.detail(cid)["messages"]
    assert [m["id"] for m in thread] == [root["id"], third["id"]]
    assert thread[1]["sibling_ids"] == [first["id"], edited["id"], third["id"]]
    # Paging follows the visible branch only.
    assert [m["id"] for m in alice.detail(cid, before_id=third["id"])["messages"]] == [root["id"]]
    assert [m["id"] for m in alice.detail(cid, from_id=root["id"])["messages"]] == [third["id"]]


def test_parent_must_belong_to_the_conversation(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    one = alice.create()["id"]
    other = alice.create()["id"]
    foreign = alice.say(other, "elsewhere")
    response = alice.post(f"/conversations/{one}/messages", {"message": "x", "parent_message_id": foreign["id"]})
    assert response.status_code == 404 and response.json()["success"] is False
    assert alice.detail(one)["messages"] == []


def test_switching_between_nested_branches(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    cid = alice.create()["id"]

    def visible() -> list[int]:
        return [m["id"] for m in alice.detail(cid, limit=500)["messages"]]

    root = alice.say(cid, "root")["id"]
    a1 = alice.say(cid, "a1")["id"]
    a2 = alice.say(cid, "a2")["id"]
    a3 = alice.say(cid, "a3")["id"]
    b2 = alice.say(cid, "b2", parent=a1)["id"]
    b3 = alice.say(cid, "b3")["id"]
    assert visible() == [root, a1, b2, b3]
    c1 = alice.say(cid, "c1", parent=root)["id"]
    assert visible() == [root, c1]
    under_a2 = alice.say(cid, "under a2", parent=a2)["id"]
    assert visible() == [root, a1, a2, under_a2]  # a3 stays a hidden sibling
    under_b3 = alice.say(cid, "under b3", parent=b3)["id"]
    assert visible() == [root, a1, b2, b3, under_b3]
    thread = alice.detail(cid)["messages"]
    assert thread[1]["sibling_ids"] == [a1, c1] and thread[2]["sibling_ids"] == [a2, b2]
    under_a3 = alice.say(cid, "under a3", parent=a3)["id"]
    assert visible() == [root, a1, a2, a3, under_a3]
    assert alice.get("/conversations").json()["body"][0]["messages"][0]["id"] == under_a3

"""Ids past what the id columns hold (32-bit conversations, sources and projects; 64-bit messages on
PostgreSQL) are misses or 400s, never a database error: the fuzzer found a 500 here on PostgreSQL."""

from __future__ import annotations

from typing import Callable

from tests.conversations.conftest import EndUser

BEYOND_INT = 2**31
BEYOND_BIGINT = 2**63


def test_ids_past_the_columns_are_misses_or_400s(make_user: Callable[..., EndUser]) -> None:
    alice = make_user()
    cid = alice.create(title="bounds")["id"]
    alice.say(cid, "hello")

    for body in ({"project_id": BEYOND_INT}, {"cloud_agent_task_id": BEYOND_INT}):
        reply = alice.post("/conversations", body)
        assert reply.status_code == 400, reply.text
        assert reply.json()["success"] is False
    assert alice.patch(f"/conversations/{cid}", {"project_id": BEYOND_INT}).status_code == 400
    assert alice.create(project_id=BEYOND_INT - 1)["project_id"] == BEYOND_INT - 1

    assert alice.get(f"/conversations/{BEYOND_INT}").status_code == 404
    assert alice.get(f"/conversations/{BEYOND_INT}/sources").status_code == 404
    assert alice.patch(f"/sources/{BEYOND_INT}", {"is_active": False}).status_code == 404
    assert alice.get("/conversations", project_id=str(BEYOND_INT)).status_code == 400

    assert alice.get(f"/conversations/{cid}", before_id=BEYOND_BIGINT).status_code == 400
    assert alice.get(f"/conversations/{cid}", from_id=BEYOND_BIGINT).status_code == 400
    assert alice.get(f"/conversations/{cid}", before_id=BEYOND_BIGINT - 1).status_code == 200
    reply = alice.post(f"/conversations/{cid}/messages", {"message": "x", "parent_message_id": BEYOND_BIGINT})
    assert reply.status_code == 400, reply.text
    reply = alice.post(f"/conversations/{cid}/messages", {"message": "x", "parent_message_id": BEYOND_BIGINT - 1})
    assert reply.status_code == 404, reply.text

    reply = alice.post(f"/conversations/{cid}/generate?model=mock-chat",
                       {"conversation_id": cid, "message_id": BEYOND_BIGINT})
    assert reply.status_code == 400, reply.text
    assert reply.json()["success"] is False

    reply = alice.post("/conversations/delete", {"conversation_ids": [BEYOND_INT, str(BEYOND_INT + 5)]})
    assert reply.status_code == 404, reply.text
    reply = alice.post("/conversations/delete", {"conversation_ids": [cid, BEYOND_INT]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["total"] == {"deleted_ids": [cid], "skipped_ids": [BEYOND_INT]}

"""GET /v1/conversations/{id}/sources, GET /v1/sources, PATCH /v1/sources/{id}: shapes, redaction,
toggling, one user never seeing another's sources (before and after sharing), and deletion."""

from __future__ import annotations

import httpx

from tests.harness import Server
from tests.sources.conftest import User, count_rows, new_user, upload


def _sources(user: User, conversation_id: int | None = None) -> httpx.Response:
    path = f"/conversations/{conversation_id}/sources" if conversation_id is not None else "/sources"
    return httpx.get(user.server.v1 + path, headers=user.headers)


def _patch(user: User, source_id: int | str, body: object) -> httpx.Response:
    return httpx.patch(f"{user.server.v1}/sources/{source_id}", headers=user.headers, json=body)


def _share(owner: User, conversation_id: int, guest: User, role: str = "member") -> None:
    response = httpx.post(f"{owner.server.v1}/conversations/{conversation_id}/participants", headers=owner.headers,
                          json={"email": guest.email, "role": role})
    assert response.status_code == 201, response.text


def test_listing_shapes_and_totals(sources_server: Server, alice: User) -> None:
    first = upload(alice, "alpha.txt", b"alpha document about rivers").json()
    conversation_id = first["conversation_id"]
    upload(alice, "beta.txt", b"beta document about mountains", conversation_id=conversation_id)
    elsewhere = upload(alice, "gamma.txt", b"gamma document about deserts").json()
    listed = _sources(alice, conversation_id)
    assert listed.status_code == 200
    body = listed.json()
    assert body["success"] is True and body["total"] == 2 and len(body["body"]) == 2
    assert {row["source_name"] for row in body["body"]} == {"alpha.txt", "beta.txt"}
    for row in body["body"]:
        assert row["conversation_id"] == conversation_id and row["is_owner"] is True
        assert row["source_config"]["file_name"] == row["source_name"]
        assert row["created_at"].endswith("Z") and isinstance(row["metadata"], dict)
        assert row["metadata"]["chunks"] == 1 and row["source_origin"] == "upload"
    everything = _sources(alice).json()
    assert list(everything) == ["success", "total", "body"]
    assert everything["total"] == 3
    assert {(row["source_name"], row["conversation_id"]) for row in everything["body"]} == {
        ("alpha.txt", conversation_id), ("beta.txt", conversation_id), ("gamma.txt", elsewhere["conversation_id"])}


def test_toggling_hides_and_restores_a_source(sources_server: Server, alice: User) -> None:
    created = upload(alice, "toggle.txt", b"a document to switch off and on").json()
    conversation_id, source_id = created["conversation_id"], created["source"]["id"]
    off = _patch(alice, source_id, {"is_active": False})
    assert off.status_code == 200, off.text
    assert off.json()["success"] is True and off.json()["source"]["is_active"] is False
    assert off.json()["source"]["updated_at"] >= off.json()["source"]["created_at"]
    assert _sources(alice, conversation_id).json() == {"success": True, "body": [], "total": 0}
    assert all(row["id"] != source_id for row in _sources(alice).json()["body"])
    detail = httpx.get(f"{sources_server.v1}/conversations/{conversation_id}", headers=alice.headers).json()
    assert detail["conversation"]["sources"] == []
    on = _patch(alice, source_id, {"is_active": True, "use_in_tasks": True})
    assert on.status_code == 200 and on.json()["source"]["use_in_tasks"] is True
    rows = _sources(alice, conversation_id).json()["body"]
    assert [(row["id"], row["is_active"], row["use_in_tasks"]) for row in rows] == [(source_id, True, True)]
    detail = httpx.get(f"{sources_server.v1}/conversations/{conversation_id}", headers=alice.headers).json()
    embedded = detail["conversation"]["sources"]
    assert len(embedded) == 1 and set(embedded[0]) == {"id", "source_type", "source_name", "source_config",
                                                      "is_active", "use_in_tasks", "handler",
                                                      "source_description", "is_owner"}
    assert embedded[0]["is_owner"] is True and embedded[0]["source_config"]["sha256"]


def test_patch_validation(sources_server: Server, alice: User) -> None:
    source_id = upload(alice, "valid.txt", b"validation target").json()["source"]["id"]
    for body in ({"is_active": "no"}, {"colour": True}, [True], {"use_in_tasks": 1}):
        response = _patch(alice, source_id, body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["success"] is False
    broken = httpx.patch(f"{sources_server.v1}/sources/{source_id}", headers=alice.headers,
                         content=b"{not json", )
    assert broken.status_code == 400
    assert _patch(alice, 99999999, {"is_active": False}).status_code == 404
    assert _patch(alice, "not-a-number", {"is_active": False}).status_code == 404
    assert _patch(alice, "bad id!", {"is_active": False}).status_code == 400
    assert _patch(alice, source_id, {}).status_code == 200


def test_other_users_see_nothing_until_shared_and_then_redacted(sources_server: Server, alice: User) -> None:
    created = upload(alice, "secret-plan.txt", b"the secret plan is to plant trees").json()
    conversation_id, source_id = created["conversation_id"], created["source"]["id"]
    bob = new_user(sources_server, alice.app_key)
    stranger = new_user(sources_server)  # another org altogether
    for outsider in (bob, stranger):
        hidden = _sources(outsider, conversation_id)
        assert hidden.status_code == 404 and hidden.json()["success"] is False
        assert _sources(outsider).json() == {"success": True, "total": 0, "body": []}
        assert _patch(outsider, source_id, {"is_active": False}).status_code == 404
    _share(alice, conversation_id, bob)
    shared = _sources(bob, conversation_id).json()
    assert shared["total"] == 1
    row = shared["body"][0]
    assert row["id"] == source_id and row["is_owner"] is False
    assert row["source_config"] and set(row["source_config"].values()) == {"[redacted]"}
    assert "sha256" in row["source_config"]  # the keys show, the values do not
    assert _sources(bob).json()["body"] == [row]
    detail = httpx.get(f"{sources_server.v1}/conversations/{conversation_id}", headers=bob.headers).json()
    assert detail["conversation"]["sources"][0]["source_config"] == row["source_config"]
    refused = _patch(bob, source_id, {"is_active": False})
    assert refused.status_code == 403 and refused.json()["code"] == "not_source_owner"
    assert _sources(alice, conversation_id).json()["total"] == 1  # unchanged
    # A participant's own upload to the shared conversation is theirs; the owner sees it redacted.
    bobs = upload(bob, "bob-notes.txt", b"bob adds his notes", conversation_id=conversation_id)
    assert bobs.status_code == 201 and bobs.json()["conversation_id"] == conversation_id
    seen_by_alice = {r["source_name"]: r for r in _sources(alice, conversation_id).json()["body"]}
    assert seen_by_alice["bob-notes.txt"]["is_owner"] is False
    assert seen_by_alice["secret-plan.txt"]["is_owner"] is True
    assert _sources(stranger, conversation_id).status_code == 404


def test_invalid_conversation_ids(sources_server: Server, alice: User) -> None:
    assert _sources(alice, "x" * 65).status_code == 400  # type: ignore[arg-type]
    assert _sources(alice, "no-such-thing").status_code == 404  # type: ignore[arg-type]
    assert _sources(alice, 987654321).status_code == 404


def test_deleting_a_conversation_removes_its_links_and_unshared_vectors(sources_server: Server, alice: User) -> None:
    data = b"a document attached to two conversations"
    first = upload(alice, "twice.txt", data).json()
    second = upload(alice, "twice.txt", data).json()
    assert second["total"]["duplicate"] is True
    only = upload(alice, "once.txt", b"a document attached to one conversation",
                  conversation_id=first["conversation_id"]).json()
    shared_id, only_id = first["source"]["id"], only["source"]["id"]
    assert count_rows(sources_server, "source_chunks", source_id=only_id) == 1
    deleted = httpx.post(f"{sources_server.v1}/conversations/delete", headers=alice.headers,
                         json={"conversation_ids": [first["conversation_id"]]})
    assert deleted.status_code == 200, deleted.text
    assert count_rows(sources_server, "source_chunks", source_id=only_id) == 0
    assert count_rows(sources_server, "sources", id=only_id) == 0
    assert count_rows(sources_server, "conversation_sources", conversation_id=first["conversation_id"]) == 0
    assert count_rows(sources_server, "source_chunks", source_id=shared_id) == 1  # still used by the second
    remaining = _sources(alice).json()["body"]
    assert [(r["id"], r["conversation_id"]) for r in remaining] == [(shared_id, second["conversation_id"])]
    httpx.post(f"{sources_server.v1}/conversations/delete", headers=alice.headers,
               json={"conversation_ids": [second["conversation_id"]]}).raise_for_status()
    assert count_rows(sources_server, "sources", id=shared_id) == 0
    assert count_rows(sources_server, "source_chunks", source_id=shared_id) == 0
    assert _sources(alice).json()["total"] == 0

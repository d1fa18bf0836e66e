"""/v1/admin/audit: the org's administrative changes, newest first, over HTTP and from the command
line."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from tests.admin.conftest import AdminOrg, admin_call, cli, error, ok
from tests.harness import Server

ENTRY_FIELDS = {"id", "at", "actor", "action", "target", "details"}


def entries(server: Server, org: AdminOrg, **params: Any) -> dict[str, Any]:
    """One page of the org's audit log."""
    page = ok(admin_call(server, org.admin, "GET", "/audit", params=params))
    assert set(page) == {"object", "data", "has_more"} and page["object"] == "list"
    assert all(set(entry) == ENTRY_FIELDS for entry in page["data"])
    return dict(page)


def test_http_actions_are_recorded_with_the_admin_key_as_actor(server: Server, org: AdminOrg) -> None:
    assert entries(server, org) == {"object": "list", "data": [], "has_more": False}  # the harness writes none
    created = ok(admin_call(server, org.admin, "POST", "/keys",
                            {"type": "application", "name": "ci", "budget_usd": 2, "user_email": "a@example.com"}),
                 201)
    key_id = created["access_key_id"]
    ok(admin_call(server, org.admin, "PATCH", f"/keys/{key_id}", {"budget_usd": None, "rpm": 30}))
    ok(admin_call(server, org.admin, "DELETE", f"/keys/{key_id}"))
    ok(admin_call(server, org.admin, "DELETE", f"/keys/{key_id}"))  # already revoked: no second entry
    ok(admin_call(server, org.admin, "PATCH", "/org", {"models": ["mock-chat"], "web_search": True}))
    page = entries(server, org)
    assert [(e["action"], e["target"], e["actor"]) for e in page["data"]] == [
        ("org.update", org.slug, org.admin_id), ("key.revoke", key_id, org.admin_id),
        ("key.update", key_id, org.admin_id), ("key.create", key_id, org.admin_id)]
    assert page["has_more"] is False
    ids = [e["id"] for e in page["data"]]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 4
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", e["at"]) for e in page["data"])
    org_update, _, key_update, key_create = (e["details"] for e in page["data"])
    assert key_create == {"type": "application", "name": "ci", "user_email": "a@example.com", "budget_usd": 2.0,
                          "rpm": None}
    assert key_update == {"budget_usd": {"from": 2.0, "to": None}, "rpm": {"from": None, "to": 30}}
    assert org_update == {"models": {"from": "*", "to": ["mock-chat"]}, "web_search": {"from": False, "to": True}}
    text = json.dumps(page)
    assert created["secret"] not in text and "secret" not in text
    # another org's admin sees none of it
    other = AdminOrg("other", server.create_key(key_type="admin"))
    assert entries(server, other)["data"] == []


def test_cli_actions_are_recorded_with_the_actor_cli(server: Server, org: AdminOrg) -> None:
    created = json.loads(cli(server, "keys", "create", "--org", org.slug, "--type", "application", "--name", "job",
                             "--rpm", "10", "--json").stdout)
    key_id = created["access_key_id"]
    cli(server, "keys", "update", key_id, "--budget-usd", "3", "--no-rpm")
    cli(server, "orgs", "update", org.slug, "--models", "mock-chat,mock-plain", "--no-file-attachments")
    cli(server, "keys", "revoke", key_id)
    page = entries(server, org)["data"]
    assert [(e["action"], e["target"], e["actor"]) for e in page] == [
        ("key.revoke", key_id, "cli"), ("org.update", org.slug, "cli"), ("key.update", key_id, "cli"),
        ("key.create", key_id, "cli")]
    assert page[2]["details"] == {"budget_usd": {"from": None, "to": 3.0}, "rpm": {"from": 10, "to": None}}
    assert page[1]["details"] == {"models": {"from": "*", "to": ["mock-chat", "mock-plain"]},
                                  "file_attachments": {"from": True, "to": False}}
    assert created["secret"] not in json.dumps(page)
    # what the commands changed is what the admin routes show
    key = ok(admin_call(server, org.admin, "GET", f"/keys/{key_id}"))
    assert (key["budget_usd"], key["rpm"], key["name"]) == (3.0, None, "job") and key["revoked_at"] is not None
    assert ok(admin_call(server, org.admin, "GET", "/org"))["models"] == ["mock-chat", "mock-plain"]


def test_org_creation_by_the_cli_is_recorded(server: Server) -> None:
    slug = f"adm-{uuid.uuid4().hex[:8]}"
    cli(server, "orgs", "create", slug, "--models", "mock-chat,fast", "--no-file-attachments", "--web-search")
    made = AdminOrg(slug, server.create_key(org=slug, key_type="admin"))  # the harness writes no entry
    assert [(e["action"], e["target"], e["actor"], e["details"]) for e in entries(server, made)["data"]] == [
        ("org.create", slug, "cli", {"models": ["mock-chat", "fast"], "file_attachments": False, "web_search": True})]
    # `keys create` on an org that does not exist creates it with defaults: recorded before the key.
    implicit = f"adm-{uuid.uuid4().hex[:8]}"
    created = json.loads(cli(server, "keys", "create", "--org", implicit, "--type", "admin", "--json").stdout)
    page = entries(server, AdminOrg(implicit, created["full_key"]))["data"]
    assert [(e["action"], e["target"], e["actor"]) for e in page] == [
        ("key.create", created["access_key_id"], "cli"), ("org.create", implicit, "cli")]
    assert page[1]["details"] == {"models": "*", "file_attachments": True, "web_search": False}
    # an org that exists already is not created again: one more key, no second org.create
    cli(server, "keys", "create", "--org", implicit, "--type", "application")
    assert [e["action"] for e in entries(server, AdminOrg(implicit, created["full_key"]))["data"]] == [
        "key.create", "key.create", "org.create"]


def test_pages_walk_back_with_after(server: Server, org: AdminOrg) -> None:
    target = server.create_key(org=org.slug).split(":")[0]
    for rpm in range(1, 8):
        ok(admin_call(server, org.admin, "PATCH", f"/keys/{target}", {"rpm": rpm}))
    everything = entries(server, org, limit=100)["data"]
    assert [e["details"]["rpm"]["to"] for e in everything] == [7, 6, 5, 4, 3, 2, 1]
    walked: list[dict[str, Any]] = []
    after = None
    while True:
        page = entries(server, org, limit=3, **({"after": after} if after is not None else {}))
        walked += page["data"]
        if not page["has_more"]:
            break
        assert len(page["data"]) == 3
        after = page["data"][-1]["id"]
    assert walked == everything
    assert entries(server, org, limit=7)["has_more"] is False
    assert entries(server, org, limit=6)["has_more"] is True
    assert entries(server, org, after=everything[-1]["id"])["data"] == []
    assert len(entries(server, org)["data"]) == 7  # the default limit is 20


def test_bad_paging_is_400(server: Server, org: AdminOrg) -> None:
    for params in ({"limit": 0}, {"limit": 101}, {"limit": "x"}, {"after": "abc"}):
        error(admin_call(server, org.admin, "GET", "/audit", params=params), 400, "invalid_request_error")

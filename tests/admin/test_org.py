"""/v1/admin/org: the org's allow-list and feature flags."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.admin.conftest import AdminOrg, admin_call, chat, error, ok
from tests.harness import Server, auth


def test_get_shows_the_defaults(server: Server, org: AdminOrg) -> None:
    assert ok(admin_call(server, org.admin, "GET", "/org")) == {"slug": org.slug, "models": "*",
                                                                "file_attachments": True, "web_search": False}


def test_allow_list_change_applies_to_the_next_call(server: Server, org: AdminOrg) -> None:
    key = server.create_key(org=org.slug)
    assert chat(server, key, "mock-chat").status_code == 200
    changed = ok(admin_call(server, org.admin, "PATCH", "/org", {"models": ["mock-plain", "embed-alias"]}))
    assert changed == {"slug": org.slug, "models": ["mock-plain", "embed-alias"], "file_attachments": True,
                       "web_search": False}
    error(chat(server, key, "mock-chat"), 403, "permission_error", "model_not_allowed")
    error(chat(server, key, "fast"), 403, "permission_error", "model_not_allowed")  # an alias of mock-chat
    assert chat(server, key, "mock-plain").status_code == 200
    listed = httpx.get(server.v1 + "/models", headers=auth(key)).json()
    assert {m["id"] for m in listed["data"]} == {"mock-plain", "mock-embed"}
    assert ok(admin_call(server, org.admin, "PATCH", "/org", {"models": "*"}))["models"] == "*"
    assert chat(server, key, "mock-chat").status_code == 200


def test_flags_change_alone(server: Server, org: AdminOrg) -> None:
    ok(admin_call(server, org.admin, "PATCH", "/org", {"models": ["mock-chat"]}))
    changed = ok(admin_call(server, org.admin, "PATCH", "/org", {"file_attachments": False, "web_search": True}))
    assert changed == {"slug": org.slug, "models": ["mock-chat"], "file_attachments": False, "web_search": True}
    assert ok(admin_call(server, org.admin, "GET", "/org")) == changed
    assert ok(admin_call(server, org.admin, "PATCH", "/org", {})) == changed


@pytest.mark.parametrize("body", [
    {"models": ["no-such-model"]}, {"models": "mock-chat"}, {"models": None}, {"models": [1]}, {"models": [""]},
    {"web_search": "yes"}, {"web_search": None}, {"file_attachments": 1}, {"slug": "renamed"}, [],
])
def test_invalid_changes_are_refused(server: Server, org: AdminOrg, body: Any) -> None:
    error(admin_call(server, org.admin, "PATCH", "/org", body), 400, "invalid_request_error")
    assert ok(admin_call(server, org.admin, "GET", "/org"))["models"] == "*"


def test_one_orgs_change_leaves_another_alone(server: Server, org: AdminOrg) -> None:
    stranger = server.create_key()
    ok(admin_call(server, org.admin, "PATCH", "/org", {"models": []}))
    assert chat(server, stranger, "mock-chat").status_code == 200
    error(chat(server, server.create_key(org=org.slug), "mock-chat"), 403, "permission_error", "model_not_allowed")

"""/v1/admin/keys: list, create, read, change and revoke the org's keys."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from inferd.auth.keys import hash_secret
from tests.admin.conftest import AdminOrg, admin_call, chat, error, ok
from tests.harness import Server, auth

KEY_FIELDS = {"access_key_id", "name", "type", "user_email", "budget_usd", "rpm", "created_at", "revoked_at",
              "spend_usd",
              # governance
              "team", "tpm", "budget_period", "models", "model_limits", "expires_at", "period_start", "resets_at"}
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")


def create(server: Server, org: AdminOrg, **body: Any) -> dict[str, Any]:
    """POST a key (an application key unless `type` is given); the 201 body."""
    return dict(ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application", **body}), 201))


def test_create_returns_the_secret_once_and_the_key_works(server: Server, org: AdminOrg) -> None:
    created = create(server, org, name="ci", user_email="ann@example.com", budget_usd=5, rpm=100)
    assert set(created) == KEY_FIELDS | {"secret", "full_key"}
    assert created["full_key"] == f"{created['access_key_id']}:{created['secret']}"
    assert re.fullmatch(r"IFDK[A-Z0-9]{28}", created["access_key_id"]) and re.fullmatch(r"[0-9a-f]{64}",
                                                                                         created["secret"])
    assert {k: created[k] for k in ("name", "type", "user_email", "budget_usd", "rpm", "revoked_at", "spend_usd")} \
        == {"name": "ci", "type": "application", "user_email": "ann@example.com", "budget_usd": 5.0, "rpm": 100,
            "revoked_at": None, "spend_usd": 0.0}
    assert RFC3339.fullmatch(created["created_at"])
    assert chat(server, created["full_key"]).status_code == 200
    # the key belongs to the admin's org
    assert server.key_row(created["full_key"])["org_id"] == server.key_row(org.admin)["org_id"]

    # never again: not in the list, the key's own object, nor as its stored hash
    for response in (admin_call(server, org.admin, "GET", "/keys"),
                     admin_call(server, org.admin, "GET", f"/keys/{created['access_key_id']}"),
                     admin_call(server, org.admin, "PATCH", f"/keys/{created['access_key_id']}", {"name": "x"}),
                     admin_call(server, org.admin, "GET", "/audit")):
        assert response.status_code == 200, response.text
        assert created["secret"] not in response.text and hash_secret(created["secret"]) not in response.text
        assert "full_key" not in response.text and "secret" not in response.text


def test_list_has_the_orgs_long_lived_keys_with_this_months_spend(server: Server, org: AdminOrg) -> None:
    spender = create(server, org, name="spender")
    admin = create(server, org, type="admin")
    assert chat(server, spender["full_key"]).status_code == 200
    user_key = server.create_user_key(spender["full_key"])  # minted by the exchange: not administered
    other_org = server.create_key()
    listing = ok(admin_call(server, org.admin, "GET", "/keys"))
    assert set(listing) == {"object", "data"} and listing["object"] == "list"
    by_id = {k["access_key_id"]: k for k in listing["data"]}
    assert set(by_id) == {org.admin_id, spender["access_key_id"], admin["access_key_id"]}
    assert user_key.split(":")[0] not in by_id and other_org.split(":")[0] not in by_id
    assert all(set(k) == KEY_FIELDS for k in listing["data"])
    assert by_id[admin["access_key_id"]]["type"] == "admin" and by_id[org.admin_id]["type"] == "admin"
    spent = server.usage_rows(spender["full_key"])[0]["cost_usd"]
    assert spent > 0 and by_id[spender["access_key_id"]]["spend_usd"] == pytest.approx(spent)
    assert by_id[admin["access_key_id"]]["spend_usd"] == 0.0
    unset = by_id[admin["access_key_id"]]
    assert unset["name"] is None and unset["budget_usd"] is None and unset["rpm"] is None
    assert unset["user_email"] is None
    one = ok(admin_call(server, org.admin, "GET", f"/keys/{spender['access_key_id']}"))
    assert one == by_id[spender["access_key_id"]]


def test_budget_change_applies_to_the_next_call(server: Server, org: AdminOrg) -> None:
    key = create(server, org)
    path = f"/keys/{key['access_key_id']}"
    assert chat(server, key["full_key"]).status_code == 200
    changed = ok(admin_call(server, org.admin, "PATCH", path, {"budget_usd": 0}))
    assert changed["budget_usd"] == 0.0 and set(changed) == KEY_FIELDS
    error(chat(server, key["full_key"]), 402, "billing_error", "budget_exceeded")
    assert ok(admin_call(server, org.admin, "PATCH", path, {"budget_usd": None}))["budget_usd"] is None
    assert chat(server, key["full_key"]).status_code == 200


def test_rpm_change_applies_to_the_next_call(server: Server, org: AdminOrg) -> None:
    key = create(server, org)
    path = f"/keys/{key['access_key_id']}"
    assert ok(admin_call(server, org.admin, "PATCH", path, {"rpm": 1}))["rpm"] == 1
    assert chat(server, key["full_key"]).status_code == 200
    refused = chat(server, key["full_key"])
    error(refused, 429, "rate_limit_error")
    assert int(refused.headers["Retry-After"]) >= 1
    # only the fields sent change: the rpm stays when the name changes
    renamed = ok(admin_call(server, org.admin, "PATCH", path, {"name": "renamed"}))
    assert renamed["name"] == "renamed" and renamed["rpm"] == 1
    assert chat(server, key["full_key"]).status_code == 429
    assert ok(admin_call(server, org.admin, "PATCH", path, {"rpm": None}))["rpm"] is None
    assert [chat(server, key["full_key"]).status_code for _ in range(3)] == [200, 200, 200]


def test_delete_revokes(server: Server, org: AdminOrg) -> None:
    key = create(server, org)
    assert chat(server, key["full_key"]).status_code == 200
    revoked = ok(admin_call(server, org.admin, "DELETE", f"/keys/{key['access_key_id']}"))
    assert set(revoked) == KEY_FIELDS and RFC3339.fullmatch(revoked["revoked_at"])
    error(chat(server, key["full_key"]), 401, "authentication_error", "key_revoked")
    # a second DELETE changes nothing
    again = ok(admin_call(server, org.admin, "DELETE", f"/keys/{key['access_key_id']}"))
    assert again["revoked_at"] == revoked["revoked_at"]
    listed = {k["access_key_id"]: k for k in ok(admin_call(server, org.admin, "GET", "/keys"))["data"]}
    assert listed[key["access_key_id"]]["revoked_at"] == revoked["revoked_at"]


def test_another_orgs_keys_and_user_keys_are_not_found(server: Server, org: AdminOrg) -> None:
    stranger = server.create_key(rpm=50)
    user_key = server.create_user_key(server.create_key(org=org.slug))
    for key_id in (stranger.split(":")[0], user_key.split(":")[0], "IFDK" + "0" * 28, "nope"):
        for method, body in (("GET", None), ("PATCH", {"rpm": 1}), ("DELETE", None)):
            error(admin_call(server, org.admin, method, f"/keys/{key_id}", body), 404, "not_found_error",
                  "key_not_found")
    # untouched
    assert chat(server, stranger).status_code == 200 and server.key_row(stranger)["rpm"] == 50
    assert server.key_row(stranger)["revoked_at"] is None
    assert ok(admin_call(server, org.admin, "GET", "/audit"))["data"] == []


@pytest.mark.parametrize("body", [
    {"type": "user"}, {"type": "owner"}, {}, {"type": "application", "budget_usd": -1},
    {"type": "application", "budget_usd": "5"}, {"type": "application", "budget_usd": True},
    {"type": "application", "rpm": 0}, {"type": "application", "rpm": 1.5}, {"type": "application", "rpm": "10"},
    {"type": "application", "rpm": True}, {"type": "application", "name": 7}, {"type": "application", "name": ""},
    {"type": "application", "user_email": "not-an-email"}, {"type": "application", "scopes": ["all"]},
    {"type": "application", "secret": "0" * 64}, [], "application",
])
def test_create_refuses_invalid_bodies(server: Server, org: AdminOrg, body: Any) -> None:
    error(admin_call(server, org.admin, "POST", "/keys", body), 400, "invalid_request_error")
    assert [k["access_key_id"] for k in ok(admin_call(server, org.admin, "GET", "/keys"))["data"]] == [org.admin_id]


@pytest.mark.parametrize("body", [
    {"budget_usd": -0.5}, {"budget_usd": "1"}, {"rpm": 0}, {"rpm": -3}, {"rpm": 2.5}, {"name": ""},
    {"type": "admin"}, {"revoked_at": None}, {"unknown": 1},
])
def test_update_refuses_invalid_bodies(server: Server, org: AdminOrg, body: dict[str, Any]) -> None:
    key = create(server, org, rpm=10, budget_usd=1)
    error(admin_call(server, org.admin, "PATCH", f"/keys/{key['access_key_id']}", body), 400,
          "invalid_request_error")
    after = ok(admin_call(server, org.admin, "GET", f"/keys/{key['access_key_id']}"))
    assert (after["rpm"], after["budget_usd"], after["type"]) == (10, 1.0, "application")


def test_malformed_json_is_400_in_the_envelope(server: Server, org: AdminOrg) -> None:
    for method, path in (("POST", "/keys"), ("PATCH", f"/keys/{org.admin_id}"), ("PATCH", "/org")):
        response = httpx.request(method, server.v1 + "/admin" + path, content=b"{not json",
                                 headers={**auth(org.admin), "content-type": "application/json"})
        error(response, 400, "invalid_request_error")


def test_bodies_over_one_mib_are_413(server: Server, org: AdminOrg) -> None:
    response = admin_call(server, org.admin, "PATCH", f"/keys/{org.admin_id}", {"name": "x" * (1024 * 1024 + 10)})
    error(response, 413, "invalid_request_error", "request_too_large")

"""Key rotation: `inferd keys rotate` and `POST /v1/admin/keys/{id}/rotate`
give the same access key id a new secret; the old one is valid for the grace period only, and the
key keeps its usage, spend and limits."""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

import pytest

from inferd.auth.keys import hash_secret
from tests.admin.conftest import AdminOrg, admin_call, chat, cli, error, ok
from tests.harness import INFERD, Server, clean_env

KEY_FIELDS = {"access_key_id", "name", "type", "user_email", "budget_usd", "rpm", "created_at", "revoked_at",
              "spend_usd"}


def rotate(server: Server, org: AdminOrg, key: str, body: Any = None) -> dict[str, Any]:
    """Rotate a key through the admin API; the 200 body."""
    return dict(ok(admin_call(server, org.admin, "POST", f"/keys/{key.split(':')[0]}/rotate", body)))


def audit_actions(server: Server, org: AdminOrg) -> list[dict[str, Any]]:
    """The org's audit entries, newest first."""
    return list(ok(admin_call(server, org.admin, "GET", "/audit"))["data"])


def run_cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    """`inferd ARGS` on the server's database, whatever its exit status."""
    env = clean_env({**server.backend.env(), "INFERD_CONFIG": str(server.config),
                     "INFERD_DATA_DIR": str(server.data_dir)})
    return subprocess.run([INFERD, *args], capture_output=True, text=True, env=env, timeout=60)


def test_cli_rotate_keeps_the_id_usage_and_audit(server: Server, org: AdminOrg) -> None:
    old = server.create_key(org=org.slug)
    key_id = old.split(":")[0]
    assert chat(server, old).status_code == 200
    result = cli(server, "keys", "rotate", key_id)
    lines = result.stdout.strip().splitlines()
    assert key_id in lines[0]
    new = lines[-1]
    assert re.fullmatch(rf"{key_id}:[0-9a-f]{{64}}", new) and new != old
    # grace 0: the old secret is refused at once, the new one works
    error(chat(server, old), 401, "authentication_error", "invalid_api_key")
    assert chat(server, new).status_code == 200
    rows = server.usage_rows(new)
    assert len(rows) == 2 and {row["key_id"] for row in rows} == {key_id}
    assert server.key_row(new)["secret_hash"] == hash_secret(new.split(":")[1])
    entry = audit_actions(server, org)[0]
    assert (entry["action"], entry["actor"], entry["target"]) == ("key.rotate", "cli", key_id)
    assert entry["details"] == {"grace_s": 0}
    # the new secret appears nowhere but in the command's output
    assert new.split(":")[1] not in json.dumps(audit_actions(server, org))


def test_cli_rotate_json_and_grace(server: Server, org: AdminOrg) -> None:
    old = server.create_key(org=org.slug)
    result = cli(server, "keys", "rotate", old.split(":")[0], "--grace", "1m", "--json")
    rotated = json.loads(result.stdout)
    assert set(rotated) == {"access_key_id", "secret", "full_key", "grace_s"}
    assert rotated["full_key"] == f"{rotated['access_key_id']}:{rotated['secret']}"
    assert rotated["access_key_id"] == old.split(":")[0] and rotated["grace_s"] == 60
    assert chat(server, old).status_code == 200 and chat(server, rotated["full_key"]).status_code == 200
    assert audit_actions(server, org)[0]["details"] == {"grace_s": 60}


@pytest.mark.parametrize("grace", ["soon", "10", "-5m", "1x", ""])
def test_cli_rotate_refuses_a_malformed_grace(server: Server, grace: str) -> None:
    old = server.create_key()
    result = run_cli(server, "keys", "rotate", old.split(":")[0], "--grace", grace)
    assert result.returncode != 0 and "--grace" in result.stderr, result.stderr
    assert server.key_row(old)["secret_hash"] == hash_secret(old.split(":")[1])  # unchanged
    assert chat(server, old).status_code == 200


def test_cli_rotate_refuses_unknown_revoked_and_user_keys(server: Server) -> None:
    parent = server.create_key()
    user_key = server.create_user_key(parent)
    revoked = server.create_key()
    server.revoke(revoked)
    for key_id in ("IFDK" + "0" * 28, user_key.split(":")[0], revoked.split(":")[0]):
        result = run_cli(server, "keys", "rotate", key_id)
        assert result.returncode != 0 and "no live application or admin key" in result.stderr, result.stderr
    assert server.key_row(user_key)["secret_hash"] == hash_secret(user_key.split(":")[1])


def test_admin_rotate_with_grace_keeps_the_old_secret_for_a_while(server: Server, org: AdminOrg) -> None:
    old = server.create_key(org=org.slug)
    key_id = old.split(":")[0]
    rotated = rotate(server, org, old, {"grace_s": 2})
    # the key object (as GET shows it) with the new secret
    shown = ok(admin_call(server, org.admin, "GET", f"/keys/{key_id}"))
    assert set(rotated) == set(shown) | {"secret", "full_key"} and KEY_FIELDS <= set(shown)
    assert {k: v for k, v in rotated.items() if k not in ("secret", "full_key")} == shown
    assert rotated["access_key_id"] == key_id and rotated["full_key"] == f"{key_id}:{rotated['secret']}"
    new = rotated["full_key"]
    started = time.monotonic()
    assert chat(server, old).status_code == 200 and chat(server, new).status_code == 200
    assert time.monotonic() - started < 2  # still inside the grace when the old one answered
    time.sleep(max(0.0, 2.2 - (time.monotonic() - started)))
    error(chat(server, old), 401, "authentication_error", "invalid_api_key")
    assert chat(server, new).status_code == 200
    entry = audit_actions(server, org)[0]
    assert (entry["action"], entry["actor"], entry["target"], entry["details"]) == (
        "key.rotate", org.admin_id, key_id, {"grace_s": 2})
    assert rotated["secret"] not in json.dumps(audit_actions(server, org))


def test_admin_rotate_without_a_body_has_no_grace(server: Server, org: AdminOrg) -> None:
    old = server.create_key(org=org.slug)
    new = rotate(server, org, old)["full_key"]
    error(chat(server, old), 401, "authentication_error", "invalid_api_key")
    assert chat(server, new).status_code == 200
    # a second rotation: only the newest secret works
    newest = rotate(server, org, new, {})["full_key"]
    error(chat(server, new), 401, "authentication_error")
    assert chat(server, newest).status_code == 200


def test_rotation_keeps_limits_and_spend(server: Server, org: AdminOrg) -> None:
    # rpm 2: one call before and one after the rotation fill the window, the third is 429
    limited = server.create_key(org=org.slug, rpm=2)
    assert chat(server, limited).status_code == 200
    rotated = rotate(server, org, limited)
    assert rotated["rpm"] == 2
    assert chat(server, rotated["full_key"]).status_code == 200
    error(chat(server, rotated["full_key"]), 429, "rate_limit_error")
    # a budget the first call spends: the new secret is refused on the same spend
    budgeted = server.create_key(org=org.slug, budget_usd=0.000001)
    assert chat(server, budgeted).status_code == 200
    spent = server.spend(budgeted)
    assert spent >= 0.000001
    rotated = rotate(server, org, budgeted)
    assert rotated["budget_usd"] == 0.000001 and rotated["spend_usd"] == pytest.approx(spent)
    error(chat(server, rotated["full_key"]), 402, "billing_error", "budget_exceeded")
    row = server.key_row(rotated["full_key"])
    assert (row["rpm"], row["budget_usd"], row["revoked_at"]) == (None, 0.000001, None)


def test_admin_rotate_refusals(server: Server, org: AdminOrg) -> None:
    key = server.create_key(org=org.slug)
    path = f"/keys/{key.split(':')[0]}/rotate"
    for body in ({"grace_s": -1}, {"grace_s": "5"}, {"grace_s": True}, {"grace_s": 10 ** 9}, {"secret": "0" * 64},
                 [], "x"):
        error(admin_call(server, org.admin, "POST", path, body), 400, "invalid_request_error")
    stranger = server.create_key()
    user_key = server.create_user_key(server.create_key(org=org.slug))
    for key_id in (stranger.split(":")[0], user_key.split(":")[0], "IFDK" + "0" * 28):
        error(admin_call(server, org.admin, "POST", f"/keys/{key_id}/rotate"), 404, "not_found_error",
              "key_not_found")
    revoked = server.create_key(org=org.slug)
    server.revoke(revoked)
    error(admin_call(server, org.admin, "POST", f"/keys/{revoked.split(':')[0]}/rotate"), 400,
          "invalid_request_error", "key_revoked")
    # an application key may not rotate anything
    error(admin_call(server, key, "POST", path), 403, "permission_error", "admin_key_required")
    # nothing changed
    for untouched in (key, stranger, user_key):
        assert server.key_row(untouched)["secret_hash"] == hash_secret(untouched.split(":")[1])
    assert chat(server, key).status_code == 200 and chat(server, stranger).status_code == 200
    assert audit_actions(server, org) == []

"""Only admin keys administer: application and user keys get 403
`admin_key_required` on every admin route, and change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admin.conftest import AdminOrg, admin_call, chat, error, ok
from tests.harness import Server


def routes(target: str) -> list[tuple[str, str, Any]]:
    """Every admin route, with a valid body where it takes one."""
    return [("GET", "/keys", None), ("POST", "/keys", {"type": "admin"}), ("GET", f"/keys/{target}", None),
            ("PATCH", f"/keys/{target}", {"budget_usd": 0}), ("DELETE", f"/keys/{target}", None),
            ("GET", "/org", None), ("PATCH", "/org", {"models": []}), ("GET", "/deployments", None),
            ("GET", "/audit", None),
            # governance: teams
            ("GET", "/teams", None), ("POST", "/teams", {"name": "perm"}), ("GET", "/teams/perm", None),
            ("PATCH", "/teams/perm", {"rpm": 1}), ("DELETE", "/teams/perm", None)]


@pytest.mark.parametrize("key_type", ["application", "user"])
def test_other_key_types_get_admin_key_required(server: Server, org: AdminOrg, key_type: str) -> None:
    app_key = server.create_key(org=org.slug)
    caller = app_key if key_type == "application" else server.create_user_key(app_key)
    target = app_key.split(":")[0]
    for method, path, body in routes(target):
        refused = admin_call(server, caller, method, path, body)
        error(refused, 403, "permission_error", "admin_key_required")
    # nothing changed: the target still works, no key was created, nothing was audited
    assert chat(server, app_key).status_code == 200
    assert server.key_row(app_key)["budget_usd"] is None
    assert len(ok(admin_call(server, org.admin, "GET", "/keys"))["data"]) == 2
    assert ok(admin_call(server, org.admin, "GET", "/org"))["models"] == "*"
    assert ok(admin_call(server, org.admin, "GET", "/audit"))["data"] == []


def test_every_admin_route_works_with_an_admin_key(server: Server, org: AdminOrg) -> None:
    target = server.create_key(org=org.slug).split(":")[0]
    statuses = [admin_call(server, org.admin, method, path, body).status_code
                for method, path, body in routes(target)]
    assert statuses == [200, 201, 200, 200, 200, 200, 200, 200, 200, 200, 201, 200, 200, 200]


def test_admin_routes_need_a_key(server: Server) -> None:
    for method, path, body in routes("IFDK" + "0" * 28):
        error(admin_call(server, "IFDKNOPE:nope", method, path, body), 401, "authentication_error")

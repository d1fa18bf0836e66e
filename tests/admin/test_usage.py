"""With an admin key, GET /v1/usage and /v1/usage/summary cover every key of its org and honour the
`key_id` and `user_id` filters; other keys keep seeing only their own."""

from __future__ import annotations

from typing import Any

import httpx

from tests.admin.conftest import AdminOrg, admin_call, chat, ok
from tests.harness import Server, auth


def usage(server: Server, key: str, path: str = "/usage", **params: Any) -> dict[str, Any]:
    """A usage report."""
    response = httpx.get(server.v1 + path, headers=auth(key), params=params, timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def groups(server: Server, key: str, group_by: str, **params: Any) -> dict[str | None, int]:
    """Requests per group of a summary."""
    body = usage(server, key, "/usage/summary", group_by=group_by, **params)
    return {g["group_value"]: g["requests"] for g in body["data"]}


def test_admin_usage_covers_the_org_with_filters(server: Server, org: AdminOrg) -> None:
    plain = ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application"}), 201)["full_key"]
    owned = ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application", "user_email": "u@x.test"}),
               201)["full_key"]
    stranger = server.create_key()
    for key in (plain, plain, owned, stranger):
        assert chat(server, key).status_code == 200
    plain_id, owned_id, stranger_id = (k.split(":")[0] for k in (plain, owned, stranger))
    user_id = usage(server, owned)["data"][0]["user_id"]
    assert user_id is not None

    rows = usage(server, org.admin)["data"]
    assert sorted(r["key_id"] for r in rows) == sorted([plain_id, plain_id, owned_id])  # not the stranger's
    assert {r["key_id"] for r in usage(server, org.admin, key_id=plain_id)["data"]} == {plain_id}
    assert len(usage(server, org.admin, key_id=plain_id)["data"]) == 2
    assert usage(server, org.admin, key_id=stranger_id)["data"] == []  # another org's key: nothing
    by_user = usage(server, org.admin, user_id=user_id)["data"]
    assert [(r["key_id"], r["user_id"]) for r in by_user] == [(owned_id, user_id)]

    assert groups(server, org.admin, "key_id") == {plain_id: 2, owned_id: 1}
    assert groups(server, org.admin, "user_id") == {None: 2, user_id: 1}
    assert groups(server, org.admin, "key_id", user_id=user_id) == {owned_id: 1}
    assert groups(server, org.admin, "model", key_id=plain_id) == {"mock-chat": 2}
    assert groups(server, org.admin, "key_id", key_id=stranger_id) == {}


def test_other_keys_still_see_only_their_own(server: Server, org: AdminOrg) -> None:
    mine = server.create_key(org=org.slug)
    sibling = server.create_key(org=org.slug)
    for key in (mine, sibling, sibling):
        assert chat(server, key).status_code == 200
    mine_id, sibling_id = mine.split(":")[0], sibling.split(":")[0]
    assert [r["key_id"] for r in usage(server, mine)["data"]] == [mine_id]
    # key_id and user_id are accepted and ignored for a self-scoped key
    assert [r["key_id"] for r in usage(server, mine, key_id=sibling_id)["data"]] == [mine_id]
    assert len(usage(server, mine, user_id="1")["data"]) == 1
    assert groups(server, mine, "key_id") == {mine_id: 1}
    assert groups(server, org.admin, "key_id") == {mine_id: 1, sibling_id: 2}

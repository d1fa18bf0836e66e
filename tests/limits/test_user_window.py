"""One requests-per-minute window per user: every user key minted for
the same user from the same parent shares the parent's limit as one window; another user of the
same parent has a window of its own, and so does the parent key itself."""

from __future__ import annotations

import uuid

import httpx

from tests.harness import Server, auth, idp_token


def conversations(server: Server, key: str) -> httpx.Response:
    """GET /v1/conversations, a user-scoped route that is never metered."""
    return httpx.get(server.v1 + "/conversations", headers=auth(key), timeout=30)


def assert_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    body = response.json()  # user-scoped routes answer {success, message, code}
    assert body.get("code", body.get("error", {}).get("code")) == "rate_limit_exceeded"
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit() and 1 <= int(retry_after) <= 60


def test_user_keys_of_one_owner_share_one_window(idp_server: Server) -> None:
    limit = 4
    owned = idp_server.create_key(user_email=f"{uuid.uuid4().hex[:10]}@example.test", rpm=limit)
    user_keys = []
    for _ in range(3):  # each exchange takes a slot of the owner key's own window
        minted = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": owned}, timeout=30)
        assert minted.status_code == 200, minted.text
        user_keys.append(minted.json()["user_key"])
    assert len(set(user_keys)) == 3

    statuses = [conversations(idp_server, user_keys[i % 3]).status_code for i in range(limit)]
    assert statuses == [200] * limit
    for key in user_keys:  # the window is full for every key of this user, not only the one that filled it
        assert_limited(conversations(idp_server, key))

    # A key minted now joins the same full window: minting never buys a user more requests.
    # (The exchange takes the owner key's fourth and last slot: that window is the owner key's own.)
    fresh = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": owned}, timeout=30)
    assert fresh.status_code == 200, fresh.text
    assert_limited(conversations(idp_server, fresh.json()["user_key"]))
    assert httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": owned}, timeout=30).status_code == 429


def test_each_user_of_one_parent_has_a_window(idp_server: Server) -> None:
    limit = 3
    app_key = idp_server.create_key(rpm=limit)
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"

    def mint(subject: str) -> str:
        minted = httpx.post(idp_server.v1 + "/auth/exchange", headers=auth(app_key),
                            json={"idp_token": idp_token(subject)}, timeout=30)
        assert minted.status_code == 200, minted.text
        return str(minted.json()["data"]["full_key"])

    alice_keys = [mint(alice), mint(alice)]
    bob_key = mint(bob)  # the parent's own window is now full (3 exchanges)
    statuses = [conversations(idp_server, alice_keys[i % 2]).status_code for i in range(limit)]
    assert statuses == [200] * limit
    assert_limited(conversations(idp_server, alice_keys[0]))
    assert_limited(conversations(idp_server, alice_keys[1]))
    # Bob is another user of the same parent: his window is untouched by Alice's.
    assert [conversations(idp_server, bob_key).status_code for _ in range(limit)] == [200] * limit
    assert_limited(conversations(idp_server, bob_key))
    # And the parent key's own window is neither: it holds only the three exchanges.
    assert httpx.get(idp_server.v1 + "/models", headers=auth(app_key), timeout=30).status_code == 429


def test_long_lived_keys_of_one_user_keep_their_own_windows(idp_server: Server) -> None:
    email = f"{uuid.uuid4().hex[:10]}@example.test"
    org = f"org-{uuid.uuid4().hex[:8]}"
    first = idp_server.create_key(org=org, user_email=email, rpm=1)
    second = idp_server.create_key(org=org, user_email=email, rpm=1)
    assert idp_server.key_row(first)["user_id"] == idp_server.key_row(second)["user_id"]
    assert httpx.get(idp_server.v1 + "/models", headers=auth(first), timeout=30).status_code == 200
    assert httpx.get(idp_server.v1 + "/models", headers=auth(first), timeout=30).status_code == 429
    assert httpx.get(idp_server.v1 + "/models", headers=auth(second), timeout=30).status_code == 200

"""Keys: format, hashing, 401 for missing/malformed/unknown/revoked/expired, key types per route."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from tests.harness import Server, auth

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


def chat(server: Server, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", headers=headers, json=BODY)


def test_key_format_and_stored_hash(server: Server, app_key: str) -> None:
    access_key_id, secret = app_key.split(":")
    assert len(access_key_id) == 32 and access_key_id.startswith("IFDK")
    assert re.fullmatch(r"[0-9a-f]{64}", secret)
    row = server.key_row(app_key)
    assert secret not in str(row.values())
    assert row["secret_hash"] == hashlib.sha256(secret.encode()).hexdigest()


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer"},
    {"Authorization": "Basic abc"},
    {"Authorization": "Bearer not-a-key"},
    {"Authorization": "Bearer IFDKAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    {"Authorization": "Bearer IFDKAAAAAAAAAAAAAAAAAAAAAAAAAAAA:" + "g" * 64},
    {"Authorization": "Bearer XXXXAAAAAAAAAAAAAAAAAAAAAAAAAAAA:" + "a" * 64},
    {"Authorization": "Bearer IFDKAAAAAAAAAAAAAAAAAAAAAAAAAAAA:" + "a" * 64},  # well formed, unknown
])
def test_bad_credentials_are_401(server: Server, headers: dict[str, str]) -> None:
    for response in (chat(server, headers), httpx.get(server.v1 + "/models", headers=headers),
                     httpx.post(server.v1 + "/chat/count_tokens", headers=headers, json=BODY)):
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"


def test_wrong_secret_is_401(server: Server, app_key: str) -> None:
    access_key_id, secret = app_key.split(":")
    wrong = secret[:-1] + ("0" if secret[-1] != "0" else "1")
    assert chat(server, auth(f"{access_key_id}:{wrong}")).status_code == 401
    assert chat(server, auth(app_key)).status_code == 200


def test_expired_key_is_401(server: Server, app_key: str) -> None:
    past = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=1)
    expired = server.create_user_key(app_key, expires_at=past, key_type="application")
    response = chat(server, auth(expired))
    assert response.status_code == 401 and response.json()["error"]["code"] == "key_expired"


def test_admin_keys_work_on_chat(server: Server) -> None:
    admin = server.create_key(key_type="admin")
    assert chat(server, auth(admin)).status_code == 200
    assert httpx.get(server.v1 + "/models", headers=auth(admin)).status_code == 200


def test_user_keys_are_refused_outside_user_routes(server: Server, app_key: str) -> None:
    user_key = server.create_user_key(app_key)
    for response in (chat(server, auth(user_key)), httpx.get(server.v1 + "/models", headers=auth(user_key)),
                     httpx.post(server.v1 + "/chat/count_tokens", headers=auth(user_key), json=BODY)):
        assert response.status_code == 403
        assert response.json()["error"] == {"message": response.json()["error"]["message"],
                                            "type": "permission_error", "code": "key_type_not_permitted"}


def test_revoking_a_parent_key_revokes_the_keys_it_minted(server: Server) -> None:
    parent = server.create_key()
    child = server.create_user_key(parent)
    assert chat(server, auth(child)).status_code == 403  # alive, but not a key for chat
    assert chat(server, auth(parent)).status_code == 200  # cached now, where a cache exists
    server.revoke(parent)
    assert chat(server, auth(parent)).status_code == 401
    assert chat(server, auth(child)).status_code == 401

"""POST /v1/auth/exchange, both shapes, with real signed tokens (HS256, RS256, ES256)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.auth.conftest import AUDIENCE, HS256_SECRET, ISSUER, JwksKeys
from tests.harness import Server, auth


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    values: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": f"sub-{uuid.uuid4().hex[:10]}",
                              "email": f"{uuid.uuid4().hex[:8]}@example.test", "given_name": "Ada",
                              "family_name": "Lovelace", "iat": now, "exp": now + 600}
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


def hs_token(**overrides: Any) -> str:
    return jwt.encode(claims(**overrides), HS256_SECRET, algorithm="HS256")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _hmac_token(header: dict[str, Any], payload: dict[str, Any], secret: bytes) -> str:
    signing_input = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(payload).encode())
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64(signature)


def exchange(server: Server, key: str | None, body: Any) -> httpx.Response:
    headers = auth(key) if key else {}
    return httpx.post(server.v1 + "/auth/exchange", headers=headers, json=body)


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_shape_a_mints_a_user_key(idp_server: Server) -> None:
    app_key = idp_server.create_key()
    token_claims = claims()
    response = exchange(idp_server, app_key, {"idp_token": jwt.encode(token_claims, HS256_SECRET, "HS256")})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True
    data = body["data"]
    assert set(data) == {"access_key_id", "secret", "full_key", "expires_at", "user_id", "org_id"}
    assert data["full_key"] == f"{data['access_key_id']}:{data['secret']}"
    assert isinstance(data["user_id"], str) and isinstance(data["org_id"], int)
    ttl = (parse_time(data["expires_at"]) - datetime.now(timezone.utc)).total_seconds()
    assert 3590 < ttl <= 3600
    row = idp_server.key_row(data["full_key"])
    parent = idp_server.key_row(app_key)
    assert row["type"] == "user" and row["org_id"] == parent["org_id"] == data["org_id"]
    assert row["parent_key_id"] == parent["id"] and str(row["user_id"]) == data["user_id"]
    assert data["secret"] not in str(row.values())
    # The minted key works on the user routes and nowhere else.
    listed = httpx.get(idp_server.v1 + "/conversations", headers=auth(data["full_key"]))
    assert listed.status_code == 200 and listed.json()["success"] is True
    models = httpx.get(idp_server.v1 + "/models", headers=auth(data["full_key"]))
    assert models.status_code == 403 and models.json()["error"]["code"] == "key_type_not_permitted"
    # The same subject resolves to the same user; the names come from the token.
    again = exchange(idp_server, app_key, {"idp_token": jwt.encode(token_claims, HS256_SECRET, "HS256")})
    assert again.json()["data"]["user_id"] == data["user_id"]
    assert again.json()["data"]["access_key_id"] != data["access_key_id"]


@pytest.mark.parametrize(("requested", "expected"), [(None, 3600), (10, 60), (59, 60), (600, 600),
                                                     (86400, 86400), (10**9, 86400), (-5, 60)])
def test_ttl_is_clamped(idp_server: Server, requested: int | None, expected: int) -> None:
    app_key = idp_server.create_key()
    body: dict[str, Any] = {"idp_token": hs_token()}
    if requested is not None:
        body["ttl_seconds"] = requested
    response = exchange(idp_server, app_key, body)
    assert response.status_code == 200, response.text
    ttl = (parse_time(response.json()["data"]["expires_at"]) - datetime.now(timezone.utc)).total_seconds()
    assert expected - 10 < ttl <= expected


def test_minted_key_expires(idp_server: Server) -> None:
    app_key = idp_server.create_key()
    response = exchange(idp_server, app_key, {"idp_token": hs_token(), "ttl_seconds": 60})
    user_key = response.json()["data"]["full_key"]
    assert httpx.get(idp_server.v1 + "/conversations", headers=auth(user_key)).status_code == 200
    # Age the key in the database rather than sleeping a minute: the server must refuse it at once.
    expired = idp_server.create_user_key(app_key, expires_at=datetime.utcnow() - timedelta(seconds=1))
    refused = httpx.get(idp_server.v1 + "/conversations", headers=auth(expired))
    assert refused.status_code == 401
    assert refused.json() == {"success": False, "message": "API key expired", "code": "key_expired"}


def test_minted_key_expires_for_real(idp_server: Server) -> None:
    """The clamped minimum (60 s) really ends: the key works, then answers 401 once the minute passes."""
    app_key = idp_server.create_key()
    minted = exchange(idp_server, app_key, {"idp_token": hs_token(), "ttl_seconds": 1}).json()["data"]
    expires_at = parse_time(minted["expires_at"])
    assert httpx.get(idp_server.v1 + "/conversations", headers=auth(minted["full_key"])).status_code == 200
    wait = (expires_at - datetime.now(timezone.utc)).total_seconds() + 0.5
    assert 50 < wait < 62
    time.sleep(wait)
    refused = httpx.get(idp_server.v1 + "/conversations", headers=auth(minted["full_key"]))
    assert refused.status_code == 401 and refused.json()["code"] == "key_expired"


@pytest.mark.parametrize("token_overrides", [
    {"exp": int(time.time()) - 120},                # expired
    {"nbf": int(time.time()) + 600},                # not yet valid
    {"iss": "https://evil.test"},                    # wrong issuer
    {"aud": "someone-else"},                         # wrong audience
    {"iss": None},                                   # missing issuer
    {"aud": None},                                   # missing audience
    {"exp": None},                                   # no expiry at all
    {"sub": None},                                   # no subject
])
def test_bad_claims_are_401(idp_server: Server, token_overrides: dict[str, Any]) -> None:
    app_key = idp_server.create_key()
    response = exchange(idp_server, app_key, {"idp_token": hs_token(**token_overrides)})
    assert response.status_code == 401, response.text
    assert response.json()["error"]["type"] == "authentication_error"
    assert response.json()["error"]["code"] == "invalid_idp_token"


def test_bad_signatures_and_algorithms_are_401(idp_server: Server, jwks_keys: JwksKeys) -> None:
    app_key = idp_server.create_key()
    forged = jwt.encode(claims(), "another-secret-of-sufficient-length-123456", algorithm="HS256")
    unsigned = jwt.encode(claims(), None, algorithm="none")
    hs512 = jwt.encode(claims(), HS256_SECRET, algorithm="HS512")
    rs256 = jwt.encode(claims(), jwks_keys.rsa, algorithm="RS256")
    tampered = hs_token()
    header, payload, signature = tampered.split(".")
    tampered = ".".join([header, payload[:-4] + ("AAAA" if payload[-4:] != "AAAA" else "BBBB"), signature])
    for token in (forged, unsigned, hs512, rs256, tampered, "not-a-jwt", "a.b.c"):
        response = exchange(idp_server, app_key, {"idp_token": token})
        assert response.status_code == 401, (token, response.text)
        assert response.json()["error"]["code"] == "invalid_idp_token"


def test_key_types_on_shape_a(idp_server: Server) -> None:
    app_key = idp_server.create_key()
    org = f"org-{uuid.uuid4().hex[:8]}"
    admin_key = idp_server.create_key(org=org, key_type="admin")
    user_key = exchange(idp_server, app_key, {"idp_token": hs_token()}).json()["data"]["full_key"]
    for key, code in ((admin_key, "application_key_required"), (user_key, "key_type_not_permitted")):
        response = exchange(idp_server, key, {"idp_token": hs_token()})
        assert response.status_code == 403, response.text
        assert response.json()["error"]["type"] == "permission_error"
        assert response.json()["error"]["code"] == code
    for headers in ({}, {"Authorization": "Bearer nope"}):
        response = httpx.post(idp_server.v1 + "/auth/exchange", headers=headers, json={"idp_token": hs_token()})
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
    idp_server.revoke(app_key)
    assert exchange(idp_server, app_key, {"idp_token": hs_token()}).status_code == 401


@pytest.mark.parametrize("body", [{}, {"ttl_seconds": 60}, {"idp_token": None}, {"idp_token": ""},
                                  {"idp_token": 42}, {"idp_token": "x", "ttl_seconds": "soon"},
                                  {"idp_token": "x", "ttl_seconds": 1.5}, {"idp_token": "x", "ttl_seconds": True},
                                  [1, 2]])
def test_invalid_bodies_are_422(idp_server: Server, body: Any) -> None:
    app_key = idp_server.create_key()
    response = exchange(idp_server, app_key, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]


def test_malformed_json_is_422(idp_server: Server) -> None:
    app_key = idp_server.create_key()
    response = httpx.post(idp_server.v1 + "/auth/exchange", headers={**auth(app_key), "content-type":
                                                                     "application/json"}, content=b"{nope")
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_json"


def test_user_is_resolved_from_sub_email_and_names(idp_server: Server) -> None:
    """A user first known by email (a key made with --user) is claimed by the subject with that
    email, once the token says the email is verified (tests/auth/test_identity_linking.py)."""
    email = f"{uuid.uuid4().hex[:8]}@example.test"
    owned_key = idp_server.create_key(user_email=email)
    org_key = idp_server.key_row(owned_key)
    app_key = idp_server.create_key(org=_org_slug(idp_server, owned_key))
    data = exchange(idp_server, app_key, {"idp_token": hs_token(email=email, email_verified=True)}).json()["data"]
    assert data["user_id"] == str(org_key["user_id"])
    # Another org with the same subject is another user.
    other = exchange(idp_server, idp_server.create_key(),
                     {"idp_token": hs_token(email=email, email_verified=True)}).json()["data"]
    assert other["user_id"] != data["user_id"] and other["org_id"] != data["org_id"]


def _org_slug(server: Server, full_key: str) -> str:
    """The org slug of a key, through the key lookup the server itself uses."""
    import asyncio

    from inferd.store.db import create_engine
    from inferd.auth.key_lookup import KeyLookup

    async def work() -> str:
        engine = create_engine(server.backend.database_url)
        try:
            record = await KeyLookup(engine).lookup(full_key.split(":")[0])
            assert record is not None
            return record.org_slug
        finally:
            await engine.dispose()

    return asyncio.run(work())


def test_shape_b_mints_a_key_for_the_owning_user(idp_server: Server) -> None:
    email = f"{uuid.uuid4().hex[:8]}@example.test"
    owned = idp_server.create_key(user_email=email, rpm=1000)
    response = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": owned})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"success", "user_key", "expires_at"} and body["success"] is True
    ttl = (parse_time(body["expires_at"]) - datetime.now(timezone.utc)).total_seconds()
    assert 3590 < ttl <= 3600
    row = idp_server.key_row(body["user_key"])
    parent = idp_server.key_row(owned)
    assert row["type"] == "user" and row["user_id"] == parent["user_id"] and row["parent_key_id"] == parent["id"]
    assert row["org_id"] == parent["org_id"] and row["expires_at"] is not None
    assert httpx.get(idp_server.v1 + "/conversations", headers=auth(body["user_key"])).status_code == 200
    # An admin key with an owner works the same; ttl_seconds is honoured and clamped here too.
    admin = idp_server.create_key(key_type="admin", user_email=email)
    short = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": admin, "ttl_seconds": 5}).json()
    assert (parse_time(short["expires_at"]) - datetime.now(timezone.utc)).total_seconds() <= 60


def test_shape_b_mints_are_audited(idp_server: Server) -> None:
    """Whoever holds a key bound to a user acts as that user: every shape-B mint is an entry of the
    org's audit log (actor the owning key, target the user); shape A (a user's own sign-in) is not."""
    org, email = f"org-{uuid.uuid4().hex[:8]}", f"{uuid.uuid4().hex[:8]}@example.test"
    owned = idp_server.create_key(org=org, user_email=email)
    admin = idp_server.create_key(org=org, key_type="admin")
    minted = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": owned, "ttl_seconds": 120})
    assert minted.status_code == 200, minted.text
    user_key = minted.json()["user_key"]
    app_key = idp_server.create_key(org=org)
    assert exchange(idp_server, app_key, {"idp_token": hs_token()}).status_code == 200  # shape A: no entry

    page = httpx.get(idp_server.v1 + "/admin/audit", headers=auth(admin)).json()
    assert len(page["data"]) == 1, page
    entry = page["data"][0]
    assert (entry["action"], entry["actor"], entry["target"]) == (
        "user_key.mint", owned.split(":")[0], str(idp_server.key_row(owned)["user_id"]))
    assert entry["details"] == {"access_key_id": user_key.split(":")[0], "user_email": email,
                                "expires_at": minted.json()["expires_at"]}
    assert user_key.split(":")[1] not in json.dumps(page) and owned.split(":")[1] not in json.dumps(page)
    # Another org's admin sees none of it.
    outsider = idp_server.create_key(key_type="admin")
    assert httpx.get(idp_server.v1 + "/admin/audit", headers=auth(outsider)).json()["data"] == []


def test_shape_b_refusals(idp_server: Server) -> None:
    unowned = idp_server.create_key()
    response = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": unowned})
    assert response.status_code == 403 and response.json()["error"]["code"] == "no_owning_user"
    for bad in ("IFDK" + "A" * 28 + ":" + "a" * 64, "garbage"):
        response = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": bad})
        assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"
    owned = idp_server.create_key(user_email=f"{uuid.uuid4().hex[:8]}@example.test")
    user_key = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": owned}).json()["user_key"]
    response = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": user_key})
    assert response.status_code == 403 and response.json()["error"]["code"] == "key_type_not_permitted"
    idp_server.revoke(owned)
    assert httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": owned}).status_code == 401
    # Revoking the parent ends the user keys it minted.
    assert httpx.get(idp_server.v1 + "/conversations", headers=auth(user_key)).status_code == 401


def test_minted_key_takes_the_parent_rpm(idp_server: Server) -> None:
    app_key = idp_server.create_key(rpm=2)
    user_key = exchange(idp_server, app_key, {"idp_token": hs_token()}).json()["data"]["full_key"]
    statuses = [httpx.get(idp_server.v1 + "/conversations", headers=auth(user_key)).status_code for _ in range(3)]
    assert statuses[:2] == [200, 200] and statuses[2] == 429


def test_user_key_refused_outside_user_routes_and_app_keys_refused_on_them(idp_server: Server) -> None:
    app_key = idp_server.create_key()
    user_key = exchange(idp_server, app_key, {"idp_token": hs_token()}).json()["data"]["full_key"]
    chat = httpx.post(idp_server.v1 + "/chat/completions", headers=auth(user_key),
                      json={"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 403 and chat.json()["error"]["code"] == "key_type_not_permitted"
    for path in ("/conversations", "/conversations/1"):
        response = httpx.get(idp_server.v1 + path, headers=auth(app_key))
        assert response.status_code == 403, path
        assert response.json() == {"success": False, "message": response.json()["message"],
                                   "code": "user_key_required"}


def test_no_idp_configured_is_503(server: Server) -> None:
    response = exchange(server, server.create_key(), {"idp_token": hs_token()})
    assert response.status_code == 503 and response.json()["error"]["code"] == "idp_not_configured"


@pytest.mark.parametrize(("algorithm", "kid"), [("RS256", "rsa-1"), ("ES256", "ec-1")])
def test_jwks_tokens(jwks_server: Server, jwks_keys: JwksKeys, algorithm: str, kid: str) -> None:
    app_key = jwks_server.create_key()
    private = jwks_keys.rsa if algorithm == "RS256" else jwks_keys.ec
    token = jwt.encode(claims(), private, algorithm=algorithm, headers={"kid": kid})
    response = exchange(jwks_server, app_key, {"idp_token": token})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["full_key"]


def test_jwks_refuses_confusion_and_strangers(jwks_server: Server, jwks_keys: JwksKeys) -> None:
    app_key = jwks_server.create_key()
    public_pem = jwks_keys.rsa.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    # HS256 signed with the RSA public key as the secret: the classic algorithm confusion
    # (crafted by hand, since PyJWT itself refuses to HMAC with a public key).
    confused = _hmac_token({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims(), public_pem)
    stranger = jwt.encode(claims(), rsa.generate_private_key(public_exponent=65537, key_size=2048),
                          algorithm="RS256", headers={"kid": "rsa-1"})
    wrong_kid_alg = jwt.encode(claims(), jwks_keys.rsa, algorithm="RS256", headers={"kid": "ec-1"})
    unsigned = jwt.encode(claims(), None, algorithm="none", headers={"kid": "rsa-1"})
    expired = jwt.encode(claims(exp=int(time.time()) - 100), jwks_keys.rsa, algorithm="RS256",
                         headers={"kid": "rsa-1"})
    for token in (confused, stranger, wrong_kid_alg, unsigned, expired):
        response = exchange(jwks_server, app_key, {"idp_token": token})
        assert response.status_code == 401, response.text

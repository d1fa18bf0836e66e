"""Identity linking on POST /v1/auth/exchange: an idp subject claims a user
first known by email (`keys create --user`, an invitation) only with `email_verified: true`; any
other token gets a user of its own that sees none of that user's conversations or invitations."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.auth.test_exchange import exchange, hs_token
from tests.harness import INFERD, Server, auth, clean_env


@dataclass
class Minted:
    """A user key minted on the exchange and the user it resolved to."""

    key: str
    user_id: str

    def conversation_ids(self, server: Server) -> list[int]:
        response = httpx.get(server.v1 + "/conversations", headers=auth(self.key))
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["body"]]

    def can_read(self, server: Server, conversation_id: int) -> bool:
        response = httpx.get(f"{server.v1}/conversations/{conversation_id}", headers=auth(self.key))
        assert response.status_code in (200, 404), response.text
        return response.status_code == 200


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def via_idp(server: Server, app_key: str, subject: str, email: str, **claims: Any) -> Minted:
    response = exchange(server, app_key, {"idp_token": hs_token(sub=subject, email=email, **claims)})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    return Minted(data["full_key"], data["user_id"])


def via_owned_key(server: Server, owned_key: str) -> Minted:
    response = httpx.post(server.v1 + "/auth/exchange", json={"api_key": owned_key})
    assert response.status_code == 200, response.text
    return Minted(response.json()["user_key"], str(server.key_row(owned_key)["user_id"]))


def create_conversation(server: Server, user: Minted, title: str) -> int:
    response = httpx.post(server.v1 + "/conversations", headers=auth(user.key), json={"title": title})
    assert response.status_code == 201, response.text
    return int(response.json()["conversation"]["id"])


def invite(server: Server, owner: Minted, conversation_id: int, email: str) -> None:
    response = httpx.post(f"{server.v1}/conversations/{conversation_id}/participants", headers=auth(owner.key),
                          json={"email": email, "role": "member"})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("unverified", [{}, {"email_verified": False}, {"email_verified": "true"},
                                        {"email_verified": 1}])
def test_unverified_email_does_not_take_over_the_email_user(idp_server: Server, unverified: dict[str, Any]) -> None:
    org, email = fresh("org"), fresh("ada") + "@example.test"
    owned_key = idp_server.create_key(org=org, user_email=email)
    email_user = via_owned_key(idp_server, owned_key)
    conversation_id = create_conversation(idp_server, email_user, "Private notes")
    app_key = idp_server.create_key(org=org)

    intruder_subject = fresh("sub")
    intruder = via_idp(idp_server, app_key, intruder_subject, email, **unverified)
    assert intruder.user_id != email_user.user_id
    assert intruder.conversation_ids(idp_server) == []
    assert not intruder.can_read(idp_server, conversation_id)
    # The email user was not claimed: a verified token for the address still gets it, conversation and all.
    owner = via_idp(idp_server, app_key, fresh("sub"), email, email_verified=True)
    assert owner.user_id == email_user.user_id
    assert owner.conversation_ids(idp_server) == [conversation_id]
    # The intruder's subject stays the separate user it became, whatever it presents later.
    again = via_idp(idp_server, app_key, intruder_subject, email, email_verified=True)
    assert again.user_id == intruder.user_id and again.conversation_ids(idp_server) == []


def test_verified_email_claims_the_user_with_its_conversations_and_invitations(idp_server: Server) -> None:
    org, email, invited = fresh("org"), fresh("bea") + "@example.test", fresh("cy") + "@example.test"
    owned_key = idp_server.create_key(org=org, user_email=email)
    email_user = via_owned_key(idp_server, owned_key)
    own = create_conversation(idp_server, email_user, "Mine")
    shared = create_conversation(idp_server, email_user, "For Cy")
    invite(idp_server, email_user, shared, invited)  # Cy is known only by this invitation
    app_key = idp_server.create_key(org=org)

    bea = via_idp(idp_server, app_key, fresh("sub"), email, email_verified=True)
    assert bea.user_id == email_user.user_id
    assert sorted(bea.conversation_ids(idp_server)) == sorted([own, shared])

    unverified_cy = via_idp(idp_server, app_key, fresh("sub"), invited)
    assert unverified_cy.conversation_ids(idp_server) == [] and not unverified_cy.can_read(idp_server, shared)
    cy = via_idp(idp_server, app_key, fresh("sub"), invited, email_verified=True)
    assert cy.user_id != unverified_cy.user_id
    assert cy.conversation_ids(idp_server) == [shared] and cy.can_read(idp_server, shared)
    # A claimed address is not claimed twice: another verified subject gets its own user.
    second = via_idp(idp_server, app_key, fresh("sub"), invited, email_verified=True)
    assert second.user_id not in (cy.user_id, unverified_cy.user_id) and second.conversation_ids(idp_server) == []


def test_unverified_email_is_not_stored_for_later_invitations(idp_server: Server) -> None:
    """A subject first seen with an unverified address must not collect invitations sent to it later;
    once the same subject proves the address, later invitations reach it."""
    org, email = fresh("org"), fresh("dan") + "@example.test"
    app_key = idp_server.create_key(org=org)
    owner = via_idp(idp_server, app_key, fresh("sub"), fresh("eve") + "@example.test", email_verified=True)
    subject = fresh("sub")

    early = via_idp(idp_server, app_key, subject, email)
    first = create_conversation(idp_server, owner, "Before verification")
    invite(idp_server, owner, first, email)
    assert early.conversation_ids(idp_server) == [] and not early.can_read(idp_server, first)

    other_org, other_email = fresh("org"), fresh("gus") + "@example.test"
    other_app = idp_server.create_key(org=other_org)
    other_owner = via_idp(idp_server, other_app, fresh("sub"), fresh("hal") + "@example.test", email_verified=True)
    gus = fresh("sub")
    unproven = via_idp(idp_server, other_app, gus, other_email)
    proven = via_idp(idp_server, other_app, gus, other_email, email_verified=True)
    assert proven.user_id == unproven.user_id  # the same subject, the same user
    invited_later = create_conversation(idp_server, other_owner, "After verification")
    invite(idp_server, other_owner, invited_later, other_email)
    assert proven.conversation_ids(idp_server) == [invited_later]


def test_a_user_key_is_never_exchanged(idp_server: Server) -> None:
    """Decision 10: a user key off the user routes is 403 key_type_not_permitted, in either shape."""
    org, email = fresh("org"), fresh("ida") + "@example.test"
    app_key = idp_server.create_key(org=org)
    owned_key = idp_server.create_key(org=org, user_email=email)
    admin_key = idp_server.create_key(org=org, key_type="admin")
    user_keys = [via_idp(idp_server, app_key, fresh("sub"), email).key, via_owned_key(idp_server, owned_key).key]
    for user_key in user_keys:
        refusals = [
            exchange(idp_server, user_key, {"idp_token": hs_token()}),            # shape A, header
            exchange(idp_server, None, {"api_key": user_key}),                     # shape B, body
            exchange(idp_server, user_key, {"api_key": owned_key}),                # shape B, header
            exchange(idp_server, app_key, {"api_key": user_key}),                  # shape B, body under an app key
        ]
        for response in refusals:
            assert response.status_code == 403, response.text
            error = response.json()["error"]
            assert error["type"] == "permission_error" and error["code"] == "key_type_not_permitted", error
    # Admin keys on shape A keep their own refusal; long-lived keys in shape B's header are fine.
    refused = exchange(idp_server, admin_key, {"idp_token": hs_token()})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "application_key_required"
    for header_key in (app_key, admin_key):
        minted = exchange(idp_server, header_key, {"api_key": owned_key})
        assert minted.status_code == 200, minted.text
        assert minted.json()["user_key"] and minted.json()["success"] is True
    bad_header = httpx.post(idp_server.v1 + "/auth/exchange", json={"api_key": owned_key},
                            headers={"Authorization": "Bearer IFDK" + "A" * 28 + ":" + "a" * 64})
    assert bad_header.status_code == 401 and bad_header.json()["error"]["type"] == "authentication_error"


def admin_creates_key(server: Server, admin_key: str, email: str) -> httpx.Response:
    return httpx.post(server.v1 + "/admin/keys", headers=auth(admin_key),
                      json={"type": "application", "user_email": email}, timeout=30)


def audit_actions(server: Server, admin_key: str) -> list[tuple[str, str, str]]:
    page = httpx.get(server.v1 + "/admin/audit", headers=auth(admin_key), params={"limit": 100}, timeout=30)
    assert page.status_code == 200, page.text
    return [(entry["action"], entry["target"], entry["actor"]) for entry in page.json()["data"]]


def test_an_admin_cannot_bind_a_key_to_a_linked_user(idp_server: Server) -> None:
    """Decision 22 (amended): a key bound to a user mints that user's keys (shape B) and so reads their
    conversations; an admin may not bind one to a user an idp subject owns: 403 user_already_linked."""
    org = fresh("org")
    app_key = idp_server.create_key(org=org)
    admin_key = idp_server.create_key(org=org, key_type="admin")
    signed_in = fresh("kim") + "@example.test"
    victim = via_idp(idp_server, app_key, fresh("sub"), signed_in, email_verified=True)
    create_conversation(idp_server, victim, "Payroll")
    # A user first known by email (a key made with --user) and then claimed by a verified subject is linked too.
    claimed = fresh("lou") + "@example.test"
    first_known = idp_server.create_key(org=org, user_email=claimed).split(":")[0]
    via_idp(idp_server, app_key, fresh("sub"), claimed, email_verified=True)

    for email in (signed_in, claimed):
        refused = admin_creates_key(idp_server, admin_key, email)
        assert refused.status_code == 403, refused.text
        assert set(refused.json()) == {"error"}
        error = refused.json()["error"]
        assert error["type"] == "permission_error" and error["code"] == "user_already_linked", error
    # Nothing was made: no key bound to either address but the one made before the claim, no audit entry.
    listed = httpx.get(idp_server.v1 + "/admin/keys", headers=auth(admin_key), timeout=30).json()["data"]
    assert [key["access_key_id"] for key in listed if key["user_email"] in (signed_in, claimed)] == [first_known]
    assert audit_actions(idp_server, admin_key) == []

    # An address no subject owns still takes a key, whose shape-B keys act as that user alone.
    unlinked = fresh("max") + "@example.test"
    created = admin_creates_key(idp_server, admin_key, unlinked)
    assert created.status_code == 201, created.text
    assert created.json()["user_email"] == unlinked
    owned = via_owned_key(idp_server, created.json()["full_key"])
    assert owned.user_id != victim.user_id and owned.conversation_ids(idp_server) == []
    # An address presented only unverified is not stored, so no linked user bears it: it takes a key,
    # bound to a user of its own (not the unverified subject's).
    loose = fresh("ned") + "@example.test"
    unverified = via_idp(idp_server, app_key, fresh("sub"), loose)
    created = admin_creates_key(idp_server, admin_key, loose)
    assert created.status_code == 201, created.text
    assert via_owned_key(idp_server, created.json()["full_key"]).user_id != unverified.user_id


def _cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env({**server.backend.env(), "INFERD_CONFIG": str(server.config),
                     "INFERD_DATA_DIR": str(server.data_dir)})
    return subprocess.run([INFERD, *args], capture_output=True, text=True, env=env, timeout=60)


def test_the_cli_refuses_a_linked_user_unless_told(idp_server: Server) -> None:
    """`inferd keys create --user` refuses a linked user as the admin route does; the operator may
    bind one deliberately with --allow-linked-user, and the audit entry says so."""
    org, email = fresh("org"), fresh("oli") + "@example.test"
    app_key = idp_server.create_key(org=org)
    admin_key = idp_server.create_key(org=org, key_type="admin")
    user = via_idp(idp_server, app_key, fresh("sub"), email, email_verified=True)
    conversation_id = create_conversation(idp_server, user, "Mine")
    command = ("keys", "create", "--org", org, "--type", "application", "--user", email, "--json")

    refused = _cli(idp_server, *command)
    assert refused.returncode != 0 and "already signs in" in refused.stderr and "--allow-linked-user" in refused.stderr
    assert audit_actions(idp_server, admin_key) == []

    allowed = _cli(idp_server, *command, "--allow-linked-user")
    assert allowed.returncode == 0, allowed.stderr
    created = json.loads(allowed.stdout)
    assert via_owned_key(idp_server, created["full_key"]).can_read(idp_server, conversation_id)
    page = httpx.get(idp_server.v1 + "/admin/audit", headers=auth(admin_key), timeout=30).json()["data"]
    create_entry = next(entry for entry in page if entry["action"] == "key.create")
    assert create_entry["actor"] == "cli" and create_entry["target"] == created["access_key_id"]
    assert create_entry["details"]["linked_user"] is True and create_entry["details"]["user_email"] == email

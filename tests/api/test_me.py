"""GET /v1/me: the calling key, its models, and what is left of every
window and budget it falls under, read from the running server."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, update

from inferd.store.tables import api_keys, orgs, teams
from tests.harness import Server, auth, on_database

CHAT = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
FIELDS = {"access_key_id", "type", "org", "team", "models", "expires_at", "limits", "budgets"}


def me(server: Server, key: str) -> httpx.Response:
    """GET /v1/me with `key`."""
    return httpx.get(server.v1 + "/me", headers=auth(key), timeout=30)


def described(server: Server, key: str) -> dict[str, Any]:
    """The 200 body of GET /v1/me."""
    response = me(server, key)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == FIELDS, body
    return dict(body)


def chat(server: Server, key: str) -> None:
    """One successful chat call."""
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=CHAT, timeout=30)
    assert response.status_code == 200, response.text


def midnight(day: date | None) -> str | None:
    """A day as the RFC 3339 instant it starts."""
    return None if day is None else f"{day.isoformat()}T00:00:00Z"


def change(server: Server, full_key: str, key_values: dict[str, Any], team: dict[str, Any] | None = None,
           org: dict[str, Any] | None = None) -> None:
    """Set columns of a key (and make it a team's, and set its org's) in the database: done before
    the server first sees the key, so no server has it cached."""
    key_id = full_key.split(":")[0]

    async def work(engine: Any) -> None:
        async with engine.begin() as conn:
            org_id = (await conn.execute(api_keys.select().where(api_keys.c.access_key_id == key_id))
                      ).mappings().one()["org_id"]
            values = dict(key_values)
            if team is not None:
                values["team_id"] = (await conn.execute(insert(teams).values(
                    org_id=org_id, created_at=datetime.now(timezone.utc).replace(tzinfo=None), **team))
                ).inserted_primary_key[0]
            await conn.execute(update(api_keys).where(api_keys.c.access_key_id == key_id).values(**values))
            if org is not None:
                await conn.execute(update(orgs).where(orgs.c.id == org_id).values(**org))

    on_database(server.backend, work)


def test_a_key_with_rpm_and_budget_shows_what_is_left(server: Server) -> None:
    key = server.create_key(rpm=5, budget_usd=1.0)
    for _ in range(2):
        chat(server, key)
    body = described(server, key)  # this call takes a slot too: 5 - 2 chats - itself
    assert body["access_key_id"] == key.split(":")[0] and body["type"] == "application"
    assert body["org"].startswith("org-") and body["team"] is None and body["expires_at"] is None
    listed = httpx.get(server.v1 + "/models", headers=auth(key), timeout=30).json()["data"]
    assert body["models"] == [model["id"] for model in listed] and "mock-chat" in body["models"]
    assert "mock-maint" not in body["models"]  # in maintenance: not listed, as on /v1/models
    assert body["limits"] == [{"scope": "key", "model": None, "rpm": 5, "tpm": None, "remaining_requests": 2,
                               "remaining_tokens": None}]
    spent = server.spend(key)
    assert spent > 0
    today = datetime.now(timezone.utc).date()
    first = today.replace(day=1)
    following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    [budget] = body["budgets"]
    assert budget == {"scope": "key", "budget_usd": 1.0, "period": "month", "spend_usd": pytest.approx(spent),
                      "period_start": midnight(first), "resets_at": midnight(following)}
    # reading counts nothing but its own request: after GET /v1/models and this read, none is left
    again = described(server, key)
    assert again["limits"][0]["remaining_requests"] == 0 and again["budgets"] == body["budgets"]
    assert me(server, key).status_code == 429  # the window is full, as on every long-lived route


def test_a_key_without_limits_has_none(server: Server, app_key: str) -> None:
    body = described(server, app_key)
    assert body["limits"] == [] and body["budgets"] == []
    admin = described(server, server.create_key(key_type="admin"))
    assert admin["type"] == "admin" and admin["budgets"] == []


def test_user_keys_are_refused(server: Server, app_key: str) -> None:
    response = me(server, server.create_user_key(app_key))
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "key_type_not_permitted"
    assert me(server, "IFDK" + "0" * 28 + ":" + "0" * 64).status_code == 401
    assert httpx.get(server.v1 + "/me", timeout=30).status_code == 401


def test_team_tokens_org_budget_and_expiry(server: Server) -> None:
    key = server.create_key(budget_usd=2.0)
    expires = (datetime.now(timezone.utc) + timedelta(days=3)).replace(tzinfo=None, microsecond=0)
    change(server, key, {"tpm": 100000, "expires_at": expires},
           team={"name": "research", "rpm": 50, "budget_usd": 3.0, "budget_period": "day", "models": None},
           org={"budget_usd": 4.0, "budget_period": "total"})
    chat(server, key)
    [row] = server.usage_rows(key)
    used = row["prompt_tokens"] + row["completion_tokens"]
    assert used > 0
    body = described(server, key)
    assert body["team"] == "research" and body["expires_at"] == expires.isoformat() + "Z"
    assert body["limits"] == [
        {"scope": "key", "model": None, "rpm": None, "tpm": 100000, "remaining_requests": None,
         "remaining_tokens": 100000 - used},
        {"scope": "team", "model": None, "rpm": 50, "tpm": None, "remaining_requests": 48,  # the chat, this call
         "remaining_tokens": None}]
    spent = server.spend(key)
    today = datetime.now(timezone.utc).date()
    assert body["budgets"] == [
        {"scope": "key", "budget_usd": 2.0, "period": "month", "spend_usd": pytest.approx(spent),
         "period_start": midnight(today.replace(day=1)), "resets_at": body["budgets"][0]["resets_at"]},
        {"scope": "team", "budget_usd": 3.0, "period": "day", "spend_usd": pytest.approx(spent),
         "period_start": midnight(today), "resets_at": midnight(today + timedelta(days=1))},
        {"scope": "org", "budget_usd": 4.0, "period": "total", "spend_usd": pytest.approx(spent),
         "period_start": None, "resets_at": None}]


def test_per_model_windows_and_the_models_a_key_may_use(server: Server) -> None:
    key = server.create_key()
    change(server, key, {"model_limits": '{"mock-chat": {"rpm": 3}}', "models": '["mock-chat", "mock-embed"]'})
    body = described(server, key)
    assert body["models"] == ["mock-chat", "mock-embed"]
    assert body["limits"] == [{"scope": "key", "model": "mock-chat", "rpm": 3, "tpm": None, "remaining_requests": 3,
                               "remaining_tokens": None}]


def test_a_key_past_its_expiry_is_401(server: Server) -> None:
    key = server.create_key()
    change(server, key, {"expires_at": (datetime.now(timezone.utc) - timedelta(seconds=1)).replace(tzinfo=None)})
    response = me(server, key)
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "key_expired"

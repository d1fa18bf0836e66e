"""Expired user keys are deleted a day after they expired, by the background job every server runs
(as it starts, then every minute); their usage, charged to the parent key with the user's id,
stays and still groups by key and by user. Keys are seeded and backdated in the real database."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, update

from inferd.store.db import utcnow
from inferd.store.tables import api_keys
from tests.conftest import MOCK_CHAT_TOML
from tests.harness import Backend, on_database, Server, Upstream, auth, serving


def _expire(backend: Backend, full_key: str, ago: timedelta) -> None:
    async def work(engine: Any) -> None:
        async with engine.begin() as conn:
            await conn.execute(update(api_keys).where(api_keys.c.access_key_id == full_key.split(":")[0])
                               .values(expires_at=utcnow() - ago))

    on_database(backend, work)


def _present(backend: Backend, full_keys: list[str]) -> set[str]:
    async def work(engine: Any) -> set[str]:
        ids = [k.split(":")[0] for k in full_keys]
        async with engine.connect() as conn:
            return set((await conn.execute(select(api_keys.c.access_key_id)
                                           .where(api_keys.c.access_key_id.in_(ids)))).scalars())

    found = on_database(backend, work)
    return {k for k in full_keys if k.split(":")[0] in found}


def _conversations(server: Server, key: str) -> httpx.Response:
    return httpx.get(server.v1 + "/conversations", headers=auth(key), timeout=30)


def test_expired_user_keys_are_deleted_after_a_day_and_their_usage_stays(
        tmp_path: Path, server: Server, backend: Backend, upstream: Upstream) -> None:
    org = f"org-sweep-{uuid.uuid4().hex[:8]}"
    parent, admin = server.create_key(org=org), server.create_key(org=org, key_type="admin")
    stale = server.create_user_key(parent, expires_at=utcnow() + timedelta(hours=1))
    user_id = server.key_row(stale)["user_id"]
    # A metered call of the user key while it lives: its usage row is the parent's, with the user's id.
    conversation = httpx.post(server.v1 + "/conversations", headers=auth(stale), json={}, timeout=30).json()
    cid = conversation["conversation"]["id"]
    said = httpx.post(f"{server.v1}/conversations/{cid}/messages", headers=auth(stale),
                      json={"message": "hello"}, timeout=30).json()["message"]
    generated = httpx.post(f"{server.v1}/conversations/{cid}/generate", params={"model": "mock-chat"},
                           headers=auth(stale), json={"conversation_id": cid, "message_id": said["id"]}, timeout=60)
    assert generated.status_code == 200, generated.text
    rows = server.usage_rows(parent)
    assert rows and {row["user_id"] for row in rows} == {str(user_id)}

    _expire(backend, stale, timedelta(days=2))
    recent = server.create_user_key(parent, expires_at=utcnow() - timedelta(hours=1))  # within the day
    live = server.create_user_key(parent, expires_at=utcnow() + timedelta(hours=1))
    expired_app = server.create_user_key(parent, expires_at=utcnow() - timedelta(days=2), key_type="application")
    # Every running server sweeps once a minute too, so the session's own server may already have
    # deleted `stale` here; the others must stay whatever sweeps.
    assert _present(backend, [recent, live, expired_app]) == {recent, live, expired_app}

    with serving(tmp_path, backend, upstream, MOCK_CHAT_TOML) as fresh:  # the job runs as a server starts
        deadline = time.monotonic() + 20
        while stale in _present(backend, [stale]):
            assert time.monotonic() < deadline, "the sweep did not delete the expired user key"
            time.sleep(0.1)
        assert _present(backend, [stale, recent, live, expired_app]) == {recent, live, expired_app}
        gone = _conversations(fresh, stale)
        assert gone.status_code == 401 and gone.json()["code"] == "invalid_api_key"
        assert _conversations(fresh, recent).json()["code"] == "key_expired"
        assert _conversations(fresh, live).status_code == 200
        # The usage rows stayed, and still group by the parent key and by the user (the org's view).
        assert server.usage_rows(parent) == rows
        for group_by, value in (("key_id", parent.split(":")[0]), ("user_id", str(user_id))):
            summary = httpx.get(fresh.v1 + "/usage/summary", headers=auth(admin), params={"group_by": group_by},
                                timeout=30)
            assert summary.status_code == 200, summary.text
            assert [(row["group_value"], row["requests"]) for row in summary.json()["data"]] == [(value, len(rows))]

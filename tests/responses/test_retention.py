"""Stored responses are kept 30 days: older ones are invisible at once and deleted by the retention
job, which a server runs as it starts and then every minute (docs/configuration.md, `[batches]`).
Rows are backdated in the real database; nothing of inferd is mocked."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, update

from inferd.store.db import create_engine, migrate, utcnow
from inferd.store.responses import RETENTION, ResponseRepository, StoredResponse
from inferd.store.tables import responses
from tests.harness import Backend, Server, Upstream, auth, serving

MOCK_CHAT = '[[models]]\nid = "mock-chat"\nbase_url = "{upstream}/v1"\nupstream_model = "mock"\n'


def _stored(key_id: str) -> StoredResponse:
    response_id = f"resp_{uuid.uuid4().hex}"
    return StoredResponse(response_id, key_id, [{"type": "message", "role": "user", "content": "hi"}],
                          {"id": response_id, "object": "response", "status": "completed", "output": []})


async def _on_db(backend: Backend, work: Any) -> Any:
    engine = create_engine(backend.database_url)
    try:
        await migrate(engine)
        return await work(engine)
    finally:
        await engine.dispose()


async def _backdate(engine: Any, response_id: str, age: timedelta) -> None:
    async with engine.begin() as conn:
        await conn.execute(update(responses).where(responses.c.id == response_id)
                           .values(created_at=utcnow() - age))


async def _ids(engine: Any, wanted: list[str]) -> set[str]:
    async with engine.connect() as conn:
        return set((await conn.execute(select(responses.c.id).where(responses.c.id.in_(wanted)))).scalars())


def test_the_job_deletes_only_what_is_older_than_30_days(backend: Backend) -> None:
    key_id = f"K{uuid.uuid4().hex[:12]}"
    old, fresh, edge = _stored(key_id), _stored(key_id), _stored(key_id)

    async def work(engine: Any) -> None:
        store = ResponseRepository(engine)
        for stored in (old, fresh, edge):
            await store.save(stored)
        await store.close()
        await _backdate(engine, old.id, RETENTION + timedelta(minutes=1))
        await _backdate(engine, edge.id, RETENTION - timedelta(minutes=1))
        assert await store.get(old.id, key_id) is None  # expired: gone for readers before the job runs
        assert (await store.get(edge.id, key_id)) is not None
        assert await store.delete_older(utcnow() - RETENTION) >= 1
        assert await _ids(engine, [old.id, fresh.id, edge.id]) == {fresh.id, edge.id}

    asyncio.run(_on_db(backend, work))


def test_a_starting_server_runs_the_job(tmp_path: Path, backend: Backend, upstream: Upstream,
                                        resp_server: Server, resp_key: str) -> None:
    created = httpx.post(resp_server.v1 + "/responses", headers=auth(resp_key),
                         json={"model": "mock-chat", "input": "Say hello"}).json()

    async def expire(engine: Any) -> None:
        await _backdate(engine, created["id"], RETENTION + timedelta(hours=1))

    asyncio.run(_on_db(backend, expire))
    missing = httpx.get(f"{resp_server.v1}/responses/{created['id']}", headers=auth(resp_key))
    assert missing.status_code == 404
    with serving(tmp_path, backend, upstream, MOCK_CHAT):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not asyncio.run(_on_db(backend, lambda engine: _ids(engine, [created["id"]]))):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the retention job did not delete the expired response")

"""Helpers for the usage report tests: GET the report, store rows with chosen timestamps."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import httpx
import orjson
import pytest

from inferd.metering.group_commit import usage_sink
from inferd.store.db import create_engine, migrate
from tests.harness import Server, auth


def get(server: Server, key: str, path: str = "/usage", **params: Any) -> httpx.Response:
    """GET a usage route with query parameters (dicts are sent as JSON text)."""
    query = {k.rstrip("_"): (orjson.dumps(v).decode() if isinstance(v, dict | list) else v)
             for k, v in params.items()}
    return httpx.get(server.v1 + path, headers=auth(key), params=query, timeout=30)


def ok(response: httpx.Response) -> dict[str, Any]:
    """The JSON body of a 200 usage answer."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True
    return dict(body)


def bad(response: httpx.Response, param: str | None = None) -> dict[str, Any]:
    """The error of a 400 answer, in the standard envelope."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error.get("param") == param, error
    return dict(error)


def usage_row(key: str, created_at: datetime, *, model: str = "mock-chat", workspace: str = "chat",
              deployment: str | None = None, prompt: int = 10, completion: int = 5, cost: float = 0.001,
              metadata: dict[str, str] | None = None, user_id: str | None = None,
              status_code: int = 200) -> dict[str, Any]:
    """A usage row (as the writer builds them) charged to `key`, at a chosen naive-UTC time."""
    return {"org": "usage-tests", "deployment": deployment or model, "key_id": key.split(":")[0],
            "user_id": user_id, "team_id": None, "model": model, "workspace": workspace, "prompt_tokens": prompt,
            "completion_tokens": completion, "cached_prompt_tokens": 0, "latency_ms": 7, "status_code": status_code,
            "cost_usd": cost, "created_at": created_at,
            "metadata": orjson.dumps(metadata).decode() if metadata else None}


def store_rows(server: Server, rows: list[dict[str, Any]]) -> None:
    """Commit rows (and their rollup) through the project's own usage sink, as the writer does
    (on PostgreSQL its one-statement asyncpg sink: batches of many rows, keys and periods)."""

    async def go() -> None:
        engine = create_engine(server.backend.database_url)
        sink = usage_sink(engine)
        try:
            await migrate(engine)
            await sink.commit(rows, {})
        finally:
            await sink.close()
            await engine.dispose()

    asyncio.run(go())


@pytest.fixture()
def chat(server: Server, app_key: str) -> Any:
    """POST one chat completion with `app_key` (optionally tagged); returns the response."""

    def call(model: str = "mock-chat", metadata: dict[str, str] | None = None, content: str = "hi") -> httpx.Response:
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}]}
        if metadata is not None:
            body["metadata"] = metadata
        response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body, timeout=30)
        assert response.status_code == 200, response.text
        return response

    return call

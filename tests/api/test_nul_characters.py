"""A NUL character in a path id, a query parameter or a body field is never a 500: PostgreSQL holds
none in text or jsonb and refuses the query (400 `invalid_request`), where SQLite finds nothing
(404, an empty page). Found by the fuzz run (GET /v1/batches?after=%00 on PostgreSQL)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness import Backend, Server, auth

QUERIES = [
    ("GET", "/v1/files/%00"), ("DELETE", "/v1/files/%00"), ("GET", "/v1/files/%00/content"),
    ("GET", "/v1/batches?after=%00"), ("GET", "/v1/batches/%00"), ("POST", "/v1/batches/%00/cancel"),
    ("GET", "/v1/usage?model=%00"), ("GET", "/v1/usage?workspace=%00"), ("GET", "/v1/usage?deployment=%00"),
    ("GET", "/v1/usage?metadata=%7B%22a%22%3A%22%5Cu0000%22%7D"), ("GET", "/v1/usage?metadata=%7B%22%5Cu0000%22%3A%22x%22%7D"),
    ("GET", "/v1/usage/summary?group_by=model&model=%00"), ("GET", "/v1/admin/keys/%00"),
    ("GET", "/v1/responses/%00"), ("DELETE", "/v1/responses/%00"),
]
BODIES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/responses", {"model": "mock-chat", "input": "a", "previous_response_id": "resp_\u0000"}),
    ("/v1/batches", {"input_file_id": "file-\u0000", "endpoint": "/v1/chat/completions",
                     "completion_window": "24h"}),
]


def _check(reply: httpx.Response, backend: Backend) -> None:
    assert reply.status_code < 500, (reply.request.url, reply.status_code, reply.text)
    if reply.status_code >= 400:
        error = reply.json()["error"]
        assert isinstance(error["message"], str) and isinstance(error["type"], str) and error["code"]
    if backend.database_url.startswith("postgres"):
        assert reply.status_code == 400 and error["code"] == "invalid_request", reply.text


@pytest.fixture(scope="module")
def admin_key(server: Server) -> str:
    """An admin key: the admin routes look the id up (an application key is refused before)."""
    return server.create_key(key_type="admin")


@pytest.mark.parametrize(("method", "path"), QUERIES)
def test_a_nul_in_the_url_is_refused_not_a_500(server: Server, backend: Backend, admin_key: str, method: str,
                                               path: str) -> None:
    _check(httpx.request(method, server.base_url + path, headers=auth(admin_key), timeout=30), backend)


@pytest.mark.parametrize(("path", "body"), BODIES)
def test_a_nul_in_a_body_field_is_refused_not_a_500(server: Server, backend: Backend, app_key: str, path: str,
                                                    body: dict[str, Any]) -> None:
    _check(httpx.post(server.base_url + path, headers=auth(app_key), json=body, timeout=30), backend)

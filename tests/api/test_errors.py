"""Framework errors in the envelope: unknown routes, wrong methods."""

from __future__ import annotations

import httpx

from tests.harness import Server, auth


def test_unknown_route_is_404_envelope(server: Server, app_key: str) -> None:
    for method in ("GET", "POST"):
        response = httpx.request(method, server.v1 + "/does/not/exist", headers=auth(app_key))
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found_error"


def test_wrong_method_is_405_envelope(server: Server, app_key: str) -> None:
    for method, path in (("GET", "/chat/completions"), ("GET", "/chat/count_tokens"), ("POST", "/models")):
        response = httpx.request(method, server.v1 + path, headers=auth(app_key))
        assert response.status_code == 405
        assert set(response.json()["error"]) >= {"message", "type", "code"}

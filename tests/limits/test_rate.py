"""Requests per minute per key: sliding window, 429 with an integer Retry-After."""

from __future__ import annotations

import httpx

from tests.harness import Server, auth

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


def test_limit_admits_exactly_rpm_then_429(server: Server) -> None:
    key = server.create_key(rpm=3)
    statuses = [httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code
                for _ in range(3)]
    assert statuses == [200, 200, 200]
    refused = httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY)
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    retry_after = refused.headers["retry-after"]
    assert retry_after.isdigit() and 1 <= int(retry_after) <= 60
    assert len(server.usage_rows(key)) == 3  # refused calls write no row


def test_every_route_counts_against_the_limit(server: Server) -> None:
    key = server.create_key(rpm=2)
    assert httpx.get(server.v1 + "/models", headers=auth(key)).status_code == 200
    assert httpx.post(server.v1 + "/chat/count_tokens", headers=auth(key), json=BODY).status_code == 200
    for response in (httpx.get(server.v1 + "/models", headers=auth(key)),
                     httpx.post(server.v1 + "/chat/count_tokens", headers=auth(key), json=BODY),
                     httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY)):
        assert response.status_code == 429 and "retry-after" in response.headers


def test_limits_are_per_key(server: Server) -> None:
    first, second = server.create_key(rpm=1), server.create_key(rpm=1)
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(first), json=BODY).status_code == 200
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(first), json=BODY).status_code == 429
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(second), json=BODY).status_code == 200

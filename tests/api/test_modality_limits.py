"""Every modality route walks the same corridor: a usage row in its own workspace, the monthly
budget (402, no row) and the per-minute limit (429 with Retry-After) apply to each."""

from __future__ import annotations

from typing import Any, Callable

import httpx
import pytest

from tests.harness import Server, auth

Call = Callable[[Server, str], httpx.Response]


def _post(path: str, body: dict[str, Any]) -> Call:
    return lambda server, key: httpx.post(server.v1 + path, headers=auth(key), json=body, timeout=30)


def _transcribe(server: Server, key: str) -> httpx.Response:
    return httpx.post(server.v1 + "/audio/transcriptions", params={"model": "mock-asr"}, headers=auth(key),
                      files={"file": ("a.wav", b"RIFF1234")}, data={"model": "whisper-1"}, timeout=30)


def _voices(server: Server, key: str) -> httpx.Response:
    return httpx.get(server.v1 + "/voices", params={"model": "mock-tts"}, headers=auth(key), timeout=30)


# route name -> (the call, its workspace, the model its row names)
ROUTES: dict[str, tuple[Call, str, str]] = {
    "embeddings": (_post("/embeddings", {"model": "mock-embed", "input": ["a b c", "d e"]}), "embeddings",
                   "mock-embed"),
    "rerank": (_post("/rerank", {"model": "mock-rerank", "query": "q", "documents": ["x", "y"]}), "rerank",
               "mock-rerank"),
    "speech": (_post("/audio/speech", {"model": "mock-tts", "voice": "alloy", "input": "Hello"}), "audio",
               "mock-tts"),
    "voices": (_voices, "audio", "mock-tts"),
    "transcriptions": (_transcribe, "audio", "mock-asr"),
    "images": (_post("/images/generations", {"model": "t2i", "prompt": "p", "size": "8x8"}), "images",
               "mock-image"),
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_each_route_writes_one_row_in_its_workspace(server: Server, route: str) -> None:
    call, workspace, model = ROUTES[route]
    key = server.create_key()
    reply = call(server, key)
    assert reply.status_code == 200, reply.text
    rows = server.usage_rows(key)
    assert len(rows) == 1
    assert rows[0]["workspace"] == workspace and rows[0]["model"] == model and rows[0]["status_code"] == 200
    assert abs(server.spend(key) - rows[0]["cost_usd"]) < 1e-12


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_each_route_answers_402_on_a_spent_budget_and_writes_nothing(server: Server, route: str) -> None:
    call, _, _ = ROUTES[route]
    key = server.create_key(budget_usd=0)
    refused = call(server, key)
    assert refused.status_code == 402, refused.text
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert server.usage_rows(key) == []


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_each_route_counts_against_the_per_minute_limit(server: Server, route: str) -> None:
    call, _, _ = ROUTES[route]
    key = server.create_key(rpm=1)
    assert call(server, key).status_code == 200
    limited = call(server, key)
    assert limited.status_code == 429
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(limited.headers["retry-after"]) >= 1
    assert len(server.usage_rows(key)) == 1

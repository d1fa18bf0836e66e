"""`x-request-id` on every response and forwarded upstream; the JSON access log."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests.harness import Backend, Server, Upstream, auth, serving
from tests.observe.conftest import OBSERVE_TOML

SECRET_WORDS = "purple-elephant-4417"


def access_lines(server: Server, request_id: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The JSON access log lines of one request (the server writes them as the request ends)."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for line in server.log().splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("request_id") == request_id and "route" in entry:
                    found.append(entry)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_every_response_carries_a_request_id(obs_server: Server) -> None:
    key = obs_server.create_key()
    responses = [
        httpx.post(obs_server.v1 + "/chat/completions", headers=auth(key), timeout=10,
                   json={"model": "obs-chat", "messages": [{"role": "user", "content": "hi"}]}),
        httpx.post(obs_server.v1 + "/chat/completions", headers=auth("bad:key"), timeout=10,
                   json={"model": "obs-chat", "messages": [{"role": "user", "content": "hi"}]}),
        httpx.get(obs_server.v1 + "/models", headers=auth(key), timeout=10),
        httpx.get(obs_server.v1 + "/no/such/route", timeout=10),
        httpx.get(obs_server.base_url + "/metrics", timeout=10),
    ]
    ids = [r.headers.get("x-request-id") for r in responses]
    assert [r.status_code for r in responses] == [200, 401, 200, 404, 200]
    assert all(ids) and len(set(ids)) == len(ids), ids
    for request_id in ids:
        assert 1 <= len(request_id) <= 128 and all(c.isalnum() or c in "._-" for c in request_id)
    with httpx.stream("POST", obs_server.v1 + "/chat/completions", headers=auth(key), timeout=10,
                      json={"model": "obs-chat", "messages": [{"role": "user", "content": "hi"}],
                            "stream": True}) as stream:
        assert stream.status_code == 200 and stream.headers.get("x-request-id")


def test_the_clients_id_is_kept_when_valid_and_forwarded_upstream(obs_server: Server, upstream: Upstream) -> None:
    key = obs_server.create_key()
    body = {"model": "obs-chat", "messages": [{"role": "user", "content": "forward me"}]}
    mine = "Trace_01.ab-" + "x" * 116  # 128 characters of the allowed set
    kept = httpx.post(obs_server.v1 + "/chat/completions", headers={**auth(key), "x-request-id": mine},
                      json=body, timeout=10)
    assert kept.status_code == 200
    assert kept.headers["x-request-id"] == mine
    received = [r for r in upstream.requests() if r["path"] == "/v1/chat/completions"]
    assert received[-1]["request_id"] == mine

    for invalid in ("x" * 129, "has space", "slash/y", "semi;colon", ""):
        response = httpx.post(obs_server.v1 + "/chat/completions", json=body, timeout=10,
                              headers={**auth(key), "x-request-id": invalid})
        assert response.status_code == 200
        assert response.headers["x-request-id"] not in (invalid, "")
        forwarded = [r for r in upstream.requests() if r["path"] == "/v1/chat/completions"][-1]["request_id"]
        assert forwarded == response.headers["x-request-id"]


def test_json_access_log_fields_and_no_secret_prompt_or_reply(obs_server: Server) -> None:
    key = obs_server.create_key()
    access_key_id, secret = key.split(":", 1)
    response = httpx.post(obs_server.v1 + "/chat/completions", headers=auth(key), timeout=10,
                          json={"model": "obs-chat", "messages": [{"role": "user", "content": SECRET_WORDS}]})
    assert response.status_code == 200
    reply = response.json()["choices"][0]["message"]["content"]
    request_id = response.headers["x-request-id"]
    lines = access_lines(obs_server, request_id)
    assert len(lines) == 1
    entry = lines[0]
    assert set(entry) == {"ts", "request_id", "method", "route", "status", "duration_ms", "key_id", "org",
                          "model", "deployment", "prompt_tokens", "completion_tokens"}
    row = obs_server.usage_rows(key)[0]
    assert entry["method"] == "POST" and entry["route"] == "/v1/chat/completions" and entry["status"] == 200
    assert entry["key_id"] == access_key_id and entry["org"] == row["org"]
    assert entry["model"] == "obs-chat" and entry["deployment"] == row["deployment"]
    assert entry["prompt_tokens"] == row["prompt_tokens"] and entry["completion_tokens"] == row["completion_tokens"]
    assert entry["duration_ms"] > 0 and entry["ts"].endswith("Z")
    log = obs_server.log()
    assert secret not in log
    assert SECRET_WORDS not in log
    assert reply and reply not in log

    refused = httpx.get(obs_server.v1 + "/models", headers=auth(f"{access_key_id}:wrong-secret"), timeout=10)
    assert refused.status_code == 401
    entry = access_lines(obs_server, refused.headers["x-request-id"])[0]
    assert entry["status"] == 401 and entry["key_id"] is None and entry["model"] is None
    assert "wrong-secret" not in obs_server.log()


def test_text_is_the_default_and_json_can_come_from_the_config(tmp_path: Path, backend: Backend,
                                                                upstream: Upstream) -> None:
    body = {"model": "obs-chat", "messages": [{"role": "user", "content": "hi"}]}
    with serving(tmp_path / "text", backend, upstream, OBSERVE_TOML) as server:
        response = httpx.post(server.v1 + "/chat/completions", headers=auth(server.create_key()), json=body,
                              timeout=10)
        assert response.status_code == 200
        time.sleep(0.3)
        assert response.headers["x-request-id"] not in server.log()  # quiet per request, as before
        assert not [line for line in server.log().splitlines() if line.startswith("{")]
        assert [line for line in server.log().splitlines() if line.startswith("inferd serving on http://")]
    with serving(tmp_path / "json", backend, upstream, '[logging]\nformat = "json"\n' + OBSERVE_TOML) as server:
        response = httpx.post(server.v1 + "/chat/completions", headers=auth(server.create_key()), json=body,
                              timeout=10)
        assert response.status_code == 200
        assert access_lines(server, response.headers["x-request-id"])[0]["model"] == "obs-chat"
        # The start-up line on stderr is an object too, so a log pipeline parses the whole stream.
        lines = server.log().splitlines()
        assert not [line for line in lines if line.startswith("inferd serving on")]
        [banner] = [json.loads(line) for line in lines if line.startswith("{") and "serving on" in line]
        assert banner["level"] == "info" and banner["message"].startswith("inferd serving on http://")

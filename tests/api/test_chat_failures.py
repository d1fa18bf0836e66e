"""Engine failures on the chat route: relayed errors, timeouts, broken streams, disconnects."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.harness import Server, Upstream, auth

HELLO = [{"role": "user", "content": "Say hello"}]


def post(server: Server, key: str, **body: object) -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", headers=auth(key), json={"messages": HELLO, **body},
                      timeout=30)


def frames(text: str) -> list[str]:
    return [f for f in text.split("\n\n") if f]


def test_model_rejection_is_relayed_with_upstream_shape_and_status(server: Server, app_key: str) -> None:
    for stream in (False, True):
        response = post(server, app_key, model="mock-err400", stream=stream)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == 400 and error["type"] == "BadRequestError" and error["param"] == "messages"
    rows = server.usage_rows(app_key)
    assert [r["status_code"] for r in rows] == [400, 400]  # it reached the engine: rows, costing nothing
    assert all(r["cost_usd"] == 0 for r in rows)


def test_relayed_error_through_openai_sdk(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="mock-err400", messages=HELLO)  # type: ignore[arg-type]
    assert caught.value.status_code == 400


def test_upstream_5xx_is_502_engine_error(server: Server, app_key: str) -> None:
    response = post(server, app_key, model="mock-err500")
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "engine_error"


def test_unreachable_upstream_is_503_engine_error(server: Server, app_key: str) -> None:
    response = post(server, app_key, model="mock-dead")
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "engine_error"
    assert server.usage_rows(app_key)[-1]["status_code"] == 503


@pytest.mark.parametrize("stream", [False, True])
def test_timeout_before_the_stream_is_504(server: Server, app_key: str, stream: bool) -> None:
    started = time.monotonic()
    response = post(server, app_key, model="mock-slow", stream=stream)
    assert time.monotonic() - started < 2.9  # timeout_s = 1 bounds the wait, not the upstream's 3 s
    assert response.status_code == 504
    assert response.json()["error"] == {"message": response.json()["error"]["message"], "type": "engine_error",
                                        "code": "timeout"}


def test_timeout_after_the_stream_started_is_an_error_frame(server: Server, app_key: str) -> None:
    response = post(server, app_key, model="mock-stall", stream=True)
    assert response.status_code == 200
    parts = frames(response.text)
    assert "[DONE]" not in response.text
    assert parts[-1].startswith('data: {"error"')
    error = httpx.Response(200, content=parts[-1][6:]).json()["error"]
    assert error["type"] == "engine_error" and error["code"] == "timeout"
    row = server.usage_rows(app_key)[-1]
    assert row["status_code"] == 504
    assert row["completion_tokens"] == 3 and row["prompt_tokens"] > 0 and row["cost_usd"] > 0


def test_upstream_dropping_the_stream_is_an_error_frame(server: Server, app_key: str) -> None:
    response = post(server, app_key, model="mock-drop", stream=True)
    parts = frames(response.text)
    assert parts[-1].startswith('data: {"error"') and "[DONE]" not in response.text
    assert '"type":"engine_error"' in parts[-1]


def test_client_disconnect_aborts_upstream_and_bills_what_was_made(server: Server, app_key: str,
                                                                   upstream: Upstream) -> None:
    received = 0
    with httpx.stream("POST", server.v1 + "/chat/completions", headers=auth(app_key),
                      json={"model": "mock-drip", "messages": HELLO, "stream": True}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                received += 1
            if received == 4:
                break  # leave mid-stream
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(a["model"] == "mock-drip-0.2" for a in upstream.aborts()):
        time.sleep(0.1)
    aborts = [a for a in upstream.aborts() if a["model"] == "mock-drip-0.2"]
    assert aborts and aborts[-1]["chunks_sent"] < 16  # the upstream stopped generating
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not server.usage_rows(app_key):
        time.sleep(0.1)
    row = server.usage_rows(app_key)[-1]
    assert row["status_code"] == 499
    assert row["completion_tokens"] >= 3 and row["prompt_tokens"] > 0 and row["cost_usd"] > 0

"""Engine failures on the chat route: relayed errors, timeouts, broken streams, disconnects."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import httpx
import openai
import orjson
import pytest
from tests.fakes.upstream import REPLY_WORDS
from tests.harness import Server, Upstream, auth, own_backend, pg_drop_database

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




def test_a_client_leaving_at_the_first_event_still_aborts_the_upstream(server: Server, app_key: str,
                                                                      upstream: Upstream) -> None:
    """The server starts watching for a disconnect a little into a stream (most streams end
    before): a client gone before then is noticed all the same, and the engine stops."""
    key = server.create_key()
    with httpx.stream("POST", server.v1 + "/chat/completions", headers=auth(key),
                      json={"model": "mock-drip", "messages": HELLO, "stream": True}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                break  # leave at once, at the first event
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not server.usage_rows(key):
        time.sleep(0.05)
    rows = server.usage_rows(key)
    assert [row["status_code"] for row in rows] == [499]
    assert rows[0]["completion_tokens"] < 16  # the upstream was stopped, not read to its end


def test_a_stream_whose_row_cannot_be_made_durable_gets_its_last_events_then_an_error(
        tmp_path: Path, config_file: Path) -> None:
    """A stream's last events go out with `[DONE]` once its usage row is durable: written to the
    usage journal (on SQLite and on PostgreSQL). When that fails while the stream runs (the
    server's file size limit is lowered under it, as a full disk would refuse), the client still
    gets every event the engine sent, then the error frame, and no `[DONE]`."""
    backend, pg_name = own_backend(tmp_path, "commitfail")
    server = Server.start(tmp_path, backend, config_file)
    limit = resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE)

    def refuse() -> None:
        resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE, (1, limit[1]))

    def mend() -> None:
        resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE, limit)

    try:
        key = server.create_key()
        request = {"model": "mock-drip", "messages": HELLO, "stream": True}  # 0.2 s between chunks
        with httpx.stream("POST", server.v1 + "/chat/completions", headers=auth(key), json=request,
                          timeout=30) as reply:
            lines = reply.iter_lines()
            first = next(lines)
            assert first.startswith("data: ")  # the stream has begun: now break the commit
            refuse()
            body = first + "\n" + "\n".join(lines)
        mend()
        sent = [orjson.loads(frame[6:]) for frame in body.split("\n\n") if frame.startswith("data: {")]
        words = "".join(chunk["choices"][0]["delta"].get("content") or ""
                        for chunk in sent[:-1] if chunk.get("choices"))
        assert words.split() == REPLY_WORDS  # all of it, the last words included
        assert sent[-1] == {"error": {"message": "Internal server error", "type": "server_error",
                                      "code": "internal_error"}}
        assert "[DONE]" not in body
        # Mended, the server writes rows again: the next call's is there, and only it.
        assert post(server, key, model="mock-chat").status_code == 200
        assert [row["model"] for row in server.usage_rows(key)] == ["mock-chat"]
    finally:
        server.stop()
        if pg_name:
            pg_drop_database(os.environ["INFERD_DATABASE_URL"], pg_name)

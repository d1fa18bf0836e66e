"""/v1/responses walks the chat corridor: budgets (402), rate limits (429 with Retry-After),
failover and fallbacks, one usage row per call, and errors in the `{error: {message, type, code}}`
envelope before a stream starts, `response.failed` after."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.harness import Server, auth

HELLO = "Say hello"


def _envelope(error: openai.APIStatusError, status: int, kind: str) -> None:
    assert error.status_code == status
    body = error.response.json()
    assert body["error"]["type"] == kind and isinstance(body["error"]["message"], str)


def test_402_when_the_budget_is_spent(resp_server: Server) -> None:
    key = resp_server.create_key(budget_usd=0)
    with openai.OpenAI(base_url=resp_server.v1, api_key=key, max_retries=0) as client:
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as caught:
                client.responses.create(model="mock-chat", input=HELLO, stream=stream)
            _envelope(caught.value, 402, "billing_error")
    assert resp_server.usage_rows(key) == []


def test_429_with_retry_after(resp_server: Server) -> None:
    key = resp_server.create_key(rpm=1)
    with openai.OpenAI(base_url=resp_server.v1, api_key=key, max_retries=0) as client:
        client.responses.create(model="mock-chat", input=HELLO)
        with pytest.raises(openai.RateLimitError) as caught:
            client.responses.create(model="mock-chat", input=HELLO)
    _envelope(caught.value, 429, "rate_limit_error")
    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert len(resp_server.usage_rows(key)) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_failover_then_fallback(client: openai.OpenAI, resp_server: Server, resp_key: str, stream: bool) -> None:
    """`doomed`: one deployment refuses connections, the other answers 503; `mock-chat` answers."""
    if stream:
        with client.responses.stream(model="doomed", input=HELLO) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="doomed", input=HELLO)
    assert response.model == "mock-chat" and response.status == "completed"
    [row] = resp_server.usage_rows(resp_key)
    assert row["model"] == "mock-chat" and row["deployment"] == "mock-chat" and row["status_code"] == 200


def test_pool_skips_its_dead_deployment(client: openai.OpenAI, resp_server: Server, resp_key: str) -> None:
    for _ in range(3):
        assert client.responses.create(model="pool", input=HELLO).status == "completed"
    rows = resp_server.usage_rows(resp_key)
    assert [(r["deployment"], r["status_code"]) for r in rows] == [("pool-live", 200)] * 3


def test_usage_row_priced_as_chat_with_metadata(client: openai.OpenAI, resp_server: Server, resp_key: str) -> None:
    client.responses.create(model="mock-chat", input=HELLO, metadata={"team": "search", "run": "7"})
    [row] = resp_server.usage_rows(resp_key)
    assert row["workspace"] == "chat" and row["deployment"] == "mock-chat"
    assert row["cost_usd"] == pytest.approx((row["prompt_tokens"] * 1.0 + row["completion_tokens"] * 2.0) / 1e6)
    assert '"team":"search"' in row["metadata"].replace(" ", "")


def test_errors_before_the_engine_use_the_envelope(resp_server: Server, resp_key: str) -> None:
    url = resp_server.v1 + "/responses"
    cases = [
        (httpx.post(url, json={"model": "mock-chat", "input": HELLO}), 401, "authentication_error"),
        (httpx.post(url, headers=auth(resp_key), content=b"{not json"), 400, "invalid_request_error"),
        (httpx.post(url, headers=auth(resp_key), json={"model": "mock-chat"}), 400, "invalid_request_error"),
        (httpx.post(url, headers=auth(resp_key), json={"model": "nope", "input": HELLO}), 404, "not_found_error"),
        (httpx.get(url, headers=auth(resp_key)), 405, "invalid_request_error"),
        (httpx.post(url, headers=auth(resp_key), json={"model": "mock-chat", "input": HELLO, "stream": True,
                                                         "previous_response_id": "resp_nope"}),
         404, "not_found_error"),
    ]
    for reply, status, kind in cases:
        assert reply.status_code == status, reply.text
        assert reply.json()["error"]["type"] == kind
    assert resp_server.usage_rows(resp_key) == []


def test_user_keys_are_refused(resp_server: Server, resp_key: str) -> None:
    user_key = resp_server.create_user_key(resp_key)
    reply = httpx.post(resp_server.v1 + "/responses", headers=auth(user_key), json={"model": "mock-chat",
                                                                                     "input": HELLO})
    assert reply.status_code == 403 and reply.json()["error"]["type"] == "permission_error"


def test_engine_rejection_is_relayed_and_billed(client: openai.OpenAI, resp_server: Server, resp_key: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="mock-err400", input=HELLO)
    assert "maximum context length" in caught.value.response.text
    [row] = resp_server.usage_rows(resp_key)
    assert row["status_code"] == 400


def test_failure_after_the_start_is_response_failed(client: openai.OpenAI, resp_server: Server,
                                                    resp_key: str) -> None:
    events = list(client.responses.create(model="mock-drop", input=HELLO, stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.failed"
    assert "response.completed" not in kinds
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.status == "failed" and failed.error is not None
    assert failed.output[0].status == "incomplete" and failed.output[0].content[0].text  # what got through
    [row] = resp_server.usage_rows(resp_key)
    assert row["status_code"] >= 500 and row["completion_tokens"] == 3

"""Every refusal of /v1/messages in Anthropic's envelope, `{type: "error", error: {type, message}}`,
through the official SDK (its exception classes follow the status) and on the wire."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import pytest

from tests.api.test_body_limits import MIB, raw_post
from tests.harness import Server

HELLO = [{"role": "user", "content": "Say hello"}]


def _sdk(server: Server, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key=key, max_retries=0, timeout=30)


def _assert_envelope(error: anthropic.APIStatusError, status: int, error_type: str) -> None:
    assert error.status_code == status
    body = error.response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == error_type == error.type
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


@pytest.mark.parametrize("request_body, where", [
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
     "messages[0].content[0].source.type"),
    ({"messages": HELLO, "tools": [{"name": "t"}]}, "tools[0].input_schema"),
    ({"messages": HELLO, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"messages": HELLO, "tools": [{"name": "t", "input_schema": {}}], "tool_choice": {"type": "tool"}},
     "tool_choice.name"),
    ({"messages": HELLO, "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"messages": HELLO, "stop_sequences": "END"}, "stop_sequences"),
])
def test_invalid_requests_are_400(claude: anthropic.Anthropic, request_body: dict, where: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="mock-chat", max_tokens=10, **request_body)
    _assert_envelope(caught.value, 400, "invalid_request_error")
    assert caught.value.response.json()["error"]["message"].startswith(where + ":")


def test_wire_level_400s(msg_server: Server, msg_key: str) -> None:
    headers = {"x-api-key": msg_key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    for content in (b"{not json", b"[1]", b'{"model": "mock-chat", "messages": [{"role": "user", "content": "x"}]}'):
        reply = httpx.post(msg_server.v1 + "/messages", headers=headers, content=content)
        assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"
    assert reply.json()["error"]["message"].startswith("max_tokens:")
    wrong_method = httpx.get(msg_server.v1 + "/messages", headers=headers)
    assert wrong_method.status_code == 405
    assert wrong_method.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                              "message": "Method GET not allowed on /v1/messages"}}


def test_engine_rejection_keeps_the_engine_message(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="mock-err400", max_tokens=10, messages=HELLO)
    _assert_envelope(caught.value, 400, "invalid_request_error")
    assert "maximum context length" in caught.value.response.json()["error"]["message"]


def test_context_overflow_is_400(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="mock-small", max_tokens=10, messages=[{"role": "user", "content": "word " * 80}])
    _assert_envelope(caught.value, 400, "invalid_request_error")


def test_401_for_a_bad_or_missing_key(msg_server: Server) -> None:
    for key in ("AKnotakey:nope", "garbage"):
        with _sdk(msg_server, key) as client, pytest.raises(anthropic.AuthenticationError) as caught:
            client.messages.create(model="mock-chat", max_tokens=10, messages=HELLO)
        _assert_envelope(caught.value, 401, "authentication_error")
    reply = httpx.post(msg_server.v1 + "/messages/count_tokens", json={"model": "mock-chat", "messages": HELLO})
    assert reply.status_code == 401 and reply.json()["error"]["type"] == "authentication_error"


def test_402_when_the_budget_is_spent(msg_server: Server) -> None:
    key = msg_server.create_key(budget_usd=0)
    with _sdk(msg_server, key) as client:
        with pytest.raises(anthropic.PaymentRequiredError) as caught:
            client.messages.create(model="mock-chat", max_tokens=10, messages=HELLO)
        _assert_envelope(caught.value, 402, "billing_error")
        assert client.messages.count_tokens(model="mock-chat", messages=HELLO).input_tokens > 0  # never 402
    assert msg_server.usage_rows(key) == []


def test_403_for_a_model_outside_the_allow_list_and_for_user_keys(msg_server: Server) -> None:
    org = f"org-{uuid.uuid4().hex[:8]}"
    msg_server.create_org(org, ("mock-tools",))
    key = msg_server.create_key(org=org)
    with _sdk(msg_server, key) as client, pytest.raises(anthropic.PermissionDeniedError) as caught:
        client.messages.create(model="mock-chat", max_tokens=10, messages=HELLO)
    _assert_envelope(caught.value, 403, "permission_error")
    user_key = msg_server.create_user_key(msg_server.create_key())
    with _sdk(msg_server, user_key) as client, pytest.raises(anthropic.PermissionDeniedError) as caught:
        client.messages.create(model="mock-chat", max_tokens=10, messages=HELLO)
    _assert_envelope(caught.value, 403, "permission_error")


def test_404_for_an_unknown_model(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.create(model="claude-nonexistent", max_tokens=10, messages=HELLO)
    _assert_envelope(caught.value, 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.count_tokens(model="claude-nonexistent", messages=HELLO)
    _assert_envelope(caught.value, 404, "not_found_error")


def test_413_over_32_mib(msg_server: Server, msg_key: str) -> None:
    """A raw socket, as in tests/api/test_body_limits.py: the server closes the connection at the cap,
    so a client still writing the body (the SDK too) may see the reset before the answer."""
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        for chunked in (True, False):
            reply = raw_post(msg_server.base_url, path, {"x-api-key": msg_key}, 34 * MIB, chunked=chunked)
            assert reply.status == 413, (path, reply.body)
            assert reply.json() == {"type": "error", "error": {"type": "request_too_large",
                                                               "message": reply.json()["error"]["message"]}}
            assert reply.closed


def test_429_with_retry_after(msg_server: Server) -> None:
    key = msg_server.create_key(rpm=1)
    with _sdk(msg_server, key) as client:
        client.messages.create(model="mock-chat", max_tokens=10, messages=HELLO)
        with pytest.raises(anthropic.RateLimitError) as caught:
            client.messages.create(model="mock-chat", max_tokens=10, messages=HELLO)
    _assert_envelope(caught.value, 429, "rate_limit_error")
    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert len(msg_server.usage_rows(key)) == 1


def test_503_overloaded(msg_server: Server, msg_key: str) -> None:
    """Every deployment at max_in_flight past queue_timeout_s: overloaded_error with Retry-After."""
    with _sdk(msg_server, msg_key) as client:
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(client.messages.create, model="tight", max_tokens=10, messages=HELLO)
            time.sleep(0.3)  # the first call holds the one slot for 1.5 s
            with pytest.raises(anthropic.ServiceUnavailableError) as caught:
                client.messages.create(model="tight", max_tokens=10, messages=HELLO)
            assert busy.result().stop_reason == "max_tokens"
    _assert_envelope(caught.value, 503, "overloaded_error")
    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert len(msg_server.usage_rows(msg_key)) == 1  # the refused call reached no engine


def test_engine_failure_is_api_error(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        claude.messages.create(model="mock-err500", max_tokens=10, messages=HELLO)
    assert caught.value.status_code >= 500
    _assert_envelope(caught.value, caught.value.status_code, "api_error")


def test_failure_after_the_start_is_an_error_event(claude: anthropic.Anthropic, msg_server: Server,
                                                   msg_key: str) -> None:
    seen = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        with claude.messages.stream(model="mock-drop", max_tokens=100, messages=HELLO) as stream:
            for event in stream:
                seen.append(event.type)
    assert seen[0] == "message_start" and "message_stop" not in seen
    body = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "api_error"  # type: ignore[index]
    rows = msg_server.usage_rows(msg_key)
    assert len(rows) == 1 and rows[0]["status_code"] >= 500

"""Every metered route obeys every limit that applies to its key: the
budgets of its team and org, the requests and tokens per minute of its team and its own, and the
allow-lists of its team and its own; OpenAI's `x-ratelimit-*` headers say where a key stands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import Backend, Server, auth
from tests.limits.governance import make_team, new_org, set_key, set_org

from tests.api.test_modality_limits import ROUTES as MODALITIES, Call, _post

CHAT = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}

# route name -> (the call, the model it names)
ROUTES: dict[str, tuple[Call, str]] = {
    "chat": (_post("/chat/completions", CHAT), "mock-chat"),
    "chat-stream": (_post("/chat/completions", {**CHAT, "stream": True}), "mock-chat"),
    "messages": (_post("/messages", {"model": "mock-chat", "max_tokens": 16,
                                     "messages": [{"role": "user", "content": "hi"}]}), "mock-chat"),
    "responses": (_post("/responses", {"model": "mock-chat", "input": "hi"}), "mock-chat"),
    **{name: (call, model) for name, (call, _, model) in MODALITIES.items() if name != "voices"},
}


def _keys_in_a_team(server: Server, count: int, **team: Any) -> list[str]:
    org = new_org()
    keys = [server.create_key(org=org) for _ in range(count)]
    team_id = make_team(server, org, **team)
    for key in keys:
        set_key(server, key, team_id=team_id)
    return keys


def _refused(reply: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    if "code" in error or "type" not in error:  # Anthropic's envelope names a type, not a code
        assert error["code"] == code, error
    return error


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_spent_team_budget_is_402_naming_the_team(server: Server, route: str) -> None:
    call, _ = ROUTES[route]
    (key,) = _keys_in_a_team(server, 1, budget_usd=0.0, budget_period="day")
    error = _refused(call(server, key), 402, "budget_exceeded")
    assert "team" in error["message"] and "Daily" in error["message"]
    assert server.usage_rows(key) == []


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_spent_org_budget_is_402_naming_the_org(server: Server, route: str) -> None:
    call, _ = ROUTES[route]
    org = new_org()
    key = server.create_key(org=org)
    set_org(server, org, budget_usd=0.0, budget_period="week")
    error = _refused(call(server, key), 402, "budget_exceeded")
    assert f"org {org}" in error["message"] and "Weekly" in error["message"]


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_team_rpm_counts_every_key_of_the_team(server: Server, route: str) -> None:
    call, _ = ROUTES[route]
    first, second = _keys_in_a_team(server, 2, rpm=1)
    admitted = call(server, first)
    assert admitted.status_code == 200, admitted.text
    assert admitted.headers["x-ratelimit-limit-requests"] == "1"
    assert admitted.headers["x-ratelimit-remaining-requests"] == "0"
    refused = call(server, second)  # another key, the same team
    _refused(refused, 429, "rate_limit_exceeded")
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_key_tpm_refuses_once_its_tokens_are_reached(server: Server, route: str) -> None:
    call, _ = ROUTES[route]
    key = server.create_key()
    set_key(server, key, tpm=1)
    first = call(server, key)
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-limit-tokens"] == "1"
    rows = server.usage_rows(key)
    tokens = rows[0]["prompt_tokens"] + rows[0]["completion_tokens"]
    second = call(server, key)
    if tokens == 0:  # a call that uses no tokens (an image priced per generation) never fills it
        assert second.status_code == 200
    else:
        _refused(second, 429, "rate_limit_exceeded")
        assert 1 <= int(second.headers["Retry-After"]) <= 60
        assert second.headers["x-ratelimit-remaining-tokens"] == "0"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_allow_lists_of_the_team_and_the_key_hold(server: Server, route: str) -> None:
    call, model = ROUTES[route]
    (in_team,) = _keys_in_a_team(server, 1, models=["some-other-model"])
    _refused(call(server, in_team), 403, "model_not_allowed")
    narrowed = server.create_key()
    set_key(server, narrowed, models=["some-other-model"])
    _refused(call(server, narrowed), 403, "model_not_allowed")
    allowed = server.create_key()
    set_key(server, allowed, models=[model])
    assert call(server, allowed).status_code == 200


def test_the_tightest_window_is_in_the_headers(server: Server) -> None:
    key = server.create_key(rpm=50)
    (team_key,) = _keys_in_a_team(server, 1, rpm=3, tpm=100_000)
    set_key(server, team_key, rpm=50)
    call, _ = ROUTES["chat"]
    plain = call(server, server.create_key())
    assert not any(name.startswith("x-ratelimit") for name in plain.headers)  # no window, no headers
    own = call(server, key)
    assert (own.headers["x-ratelimit-limit-requests"], own.headers["x-ratelimit-remaining-requests"]) == ("50", "49")
    assert own.headers["x-ratelimit-reset-requests"] in ("59s", "1m0s")
    assert "x-ratelimit-limit-tokens" not in own.headers
    in_team = call(server, team_key)  # the team's 3 is tighter than the key's 50
    assert (in_team.headers["x-ratelimit-limit-requests"], in_team.headers["x-ratelimit-remaining-requests"]) \
        == ("3", "2")
    assert in_team.headers["x-ratelimit-limit-tokens"] == "100000"
    assert int(in_team.headers["x-ratelimit-remaining-tokens"]) == 100_000  # tokens count once the call ends
    after = call(server, team_key)
    rows = server.usage_rows(team_key)
    used = rows[0]["prompt_tokens"] + rows[0]["completion_tokens"]
    assert used > 0 and int(after.headers["x-ratelimit-remaining-tokens"]) == 100_000 - used


def test_a_day_budget_answers_again_the_next_utc_day(tmp_path: Path, backend: Backend, config_file: Path,
                                                    server: Server) -> None:
    """The clock is moved by a second server on the same database, a day ahead: the day's budget
    resets; a `total` one never does."""
    call, _ = ROUTES["chat"]
    daily, forever = server.create_key(), server.create_key()
    set_key(server, daily, budget_usd=1e-9, budget_period="day")
    set_key(server, forever, budget_usd=1e-9, budget_period="total")
    for key in (daily, forever):
        assert call(server, key).status_code == 200  # spends past its budget
        _refused(call(server, key), 402, "budget_exceeded")
    tomorrow = Server.start(tmp_path, backend, config_file, extra_env={"INFERD_CLOCK_SKEW_S": "86400"})
    try:
        assert call(tomorrow, daily).status_code == 200
        _refused(call(tomorrow, daily), 402, "budget_exceeded")  # and tomorrow's is spent in turn
        _refused(call(tomorrow, forever), 402, "budget_exceeded")
    finally:
        tomorrow.stop()
    rows = server.usage_rows(daily)
    assert len(rows) == 2 and rows[1]["created_at"].date() > rows[0]["created_at"].date()

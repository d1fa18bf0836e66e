"""Usage rows: every field, prices, cached prompt tokens, rows for failed engine calls."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from tests.fakes.upstream import count_prompt_tokens
from tests.harness import Server, auth

MESSAGES = [{"role": "user", "content": "Tell me something"}]


def test_row_has_every_field(server: Server) -> None:
    key = server.create_key(org="metered-org", user_email="ann@example.com")
    before = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=1)
    reply = httpx.post(server.v1 + "/chat/completions", headers=auth(key),
                       json={"model": "fast", "messages": MESSAGES, "metadata": {"team": "a", "env": "prod"}}).json()
    row = server.usage_rows(key)[-1]
    prompt = count_prompt_tokens({"messages": MESSAGES})
    assert row["org"] == "metered-org" and row["deployment"] == "mock-chat" and row["model"] == "mock-chat"
    assert row["key_id"] == key.split(":")[0] and row["user_id"] is not None
    assert row["workspace"] == "chat" and row["status_code"] == 200 and row["team_id"] is None
    assert row["prompt_tokens"] == prompt == reply["usage"]["prompt_tokens"]
    assert row["completion_tokens"] == reply["usage"]["completion_tokens"]
    assert row["cached_prompt_tokens"] == prompt // 2  # prefix_cache = true on mock-chat
    assert row["cost_usd"] == pytest.approx((prompt * 1.0 + row["completion_tokens"] * 2.0) / 1e6)
    assert row["latency_ms"] >= 0 and row["created_at"] >= before
    assert row["metadata"] == '{"team":"a","env":"prod"}'


def test_no_price_costs_nothing_and_cache_off_reports_zero(server: Server, app_key: str) -> None:
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                      json={"model": "mock-plain", "messages": MESSAGES}).status_code == 200
    row = server.usage_rows(app_key)[-1]
    assert row["cost_usd"] == 0 and row["cached_prompt_tokens"] == 0 and row["metadata"] is None


def test_refused_calls_write_no_row(server: Server) -> None:
    key = server.create_key(rpm=1)
    bad = [{"model": "mock-chat"}, {"model": "unknown", "messages": MESSAGES},
           {"model": "mock-maint", "messages": MESSAGES}]
    for body in bad:
        assert httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=body).status_code >= 400
    assert server.usage_rows(key) == []


def test_streamed_and_blocking_cost_the_same(server: Server, app_key: str) -> None:
    replies = [httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                          json={"model": "mock-chat", "messages": MESSAGES, "stream": stream})
               for stream in (False, True)]
    assert [r.status_code for r in replies] == [200, 200]
    frames = [f for f in replies[1].text.split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"  # the stream ran to its end, its usage last before the end
    assert json.loads(frames[-2].removeprefix("data: "))["usage"] == replies[0].json()["usage"]
    blocking, streamed = server.usage_rows(app_key)
    assert blocking["status_code"] == streamed["status_code"] == 200
    prompt = count_prompt_tokens({"messages": MESSAGES})
    assert (blocking["prompt_tokens"], blocking["completion_tokens"]) == (
        prompt, replies[0].json()["usage"]["completion_tokens"])
    assert blocking["cost_usd"] == pytest.approx((prompt * 1.0 + blocking["completion_tokens"] * 2.0) / 1e6)
    assert blocking["cost_usd"] > 0 and blocking["cached_prompt_tokens"] == prompt // 2
    for field in ("prompt_tokens", "completion_tokens", "cost_usd", "cached_prompt_tokens"):
        assert blocking[field] == streamed[field]


def test_a_long_usage_less_stream_counts_each_delta_once() -> None:
    """The relay keeps a usage-less stream's batches for the count at the end, and counts and
    drops them past 256 KiB: either way each non-empty delta is counted once (in-process: no
    fake upstream streams this long)."""
    from inferd.services.chat_stream import StreamRelay

    relay = StreamRelay(None, None)  # type: ignore[arg-type]  # only the batch bookkeeping runs
    role = b'{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}'
    word = b'{"id":"c1","choices":[{"index":0,"delta":{"content":"word "}}],"usage":null}'
    end = b'{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}'
    sent = relay._sse([role])
    for _ in range(400):  # 400 batches of 20 deltas: about 1.3 MB, over the backlog's bound 5 times
        sent += relay._sse([word] * 20)
    relay._sse([end])
    assert relay._uncounted_bytes < 1 << 18 and relay._deltas > 0  # counted on the way, bounded
    relay._count_deltas()
    assert relay._usage is None and relay._deltas == 8000
    assert relay._chunk_head == {"id": "c1", "created": None}
    assert sent.count(b"data: ") == 8001  # the frames themselves are untouched


def test_the_last_usage_a_stream_reports_is_the_one_billed() -> None:
    from inferd.services.chat_stream import StreamRelay

    relay = StreamRelay(None, None)  # type: ignore[arg-type]
    word = b'{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}'
    running = b'{"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}'
    final = b'{"choices":[],"usage": {"prompt_tokens": 5, "completion_tokens": 3}}'
    relay._sse([word, running, word])
    assert relay._usage == (5, 2, 0)
    relay._sse([word, running, final, word])  # two in one batch: the later one counts
    assert relay._usage == (5, 3, 0) and relay._uncounted == []

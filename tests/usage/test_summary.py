"""GET /v1/usage/summary: totals per group, by cost, over whole days (rollup) and ragged ends (rows)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from tests.harness import Server, auth
from tests.usage.conftest import bad, get, ok, store_rows, usage_row

SUMMARY_FIELDS = {"group_value", "requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
                  "total_tokens", "cost_usd", "cache_hits", "saved_usd"}


def summary(server: Server, key: str, group_by: str, **params: Any) -> dict[str, Any]:
    body = ok(get(server, key, "/usage/summary", group_by=group_by, **params))
    assert body["group_by"] == group_by
    assert all(set(row) == SUMMARY_FIELDS for row in body["data"])
    return body


def by_value(body: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    return {row["group_value"]: row for row in body["data"]}


def test_group_by_model_from_real_calls(server: Server, app_key: str, chat: Any) -> None:
    chat()
    chat()
    chat(model="mock-small", content="a much longer prompt so this one costs more than the others do")
    embedded = httpx.post(server.v1 + "/embeddings", headers=auth(app_key), json={"model": "mock-embed", "input": "x"})
    assert embedded.status_code == 200
    rows = ok(get(server, app_key))["data"]
    body = summary(server, app_key, "model")
    groups = by_value(body)
    assert set(groups) == {"mock-chat", "mock-small", "mock-embed"}
    for model, group in groups.items():
        mine = [r for r in rows if r["model"] == model]
        assert group["requests"] == len(mine)
        assert group["prompt_tokens"] == sum(r["prompt_tokens"] for r in mine)
        assert group["completion_tokens"] == sum(r["completion_tokens"] for r in mine)
        assert group["cached_prompt_tokens"] == sum(r["cached_prompt_tokens"] for r in mine)
        assert group["total_tokens"] == group["prompt_tokens"] + group["completion_tokens"]
        assert group["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in mine), rel=1e-6)
    costs = [row["cost_usd"] for row in body["data"]]
    assert costs == sorted(costs, reverse=True)  # by cost, highest first
    workspaces = by_value(summary(server, app_key, "workspace"))
    assert {k: v["requests"] for k, v in workspaces.items()} == {"chat": 3, "embeddings": 1}


def test_groups_ordered_by_cost_and_paged(server: Server, app_key: str) -> None:
    at = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(hours=2)
    costs = {"m-a": 0.5, "m-b": 2.0, "m-c": 1.25, "m-d": 0.125}
    store_rows(server, [usage_row(app_key, at, model=m, cost=c / 2) for m, c in costs.items() for _ in range(2)])
    body = summary(server, app_key, "model")
    assert [r["group_value"] for r in body["data"]] == ["m-b", "m-c", "m-a", "m-d"]
    assert [r["cost_usd"] for r in body["data"]] == [2.0, 1.25, 0.5, 0.125]
    assert body["pagination"]["has_more"] is False and body["pagination"]["limit"] == 100
    first = summary(server, app_key, "model", limit=2)
    assert [r["group_value"] for r in first["data"]] == ["m-b", "m-c"] and first["pagination"]["has_more"] is True
    second = summary(server, app_key, "model", limit=2, offset=2)
    assert [r["group_value"] for r in second["data"]] == ["m-a", "m-d"]
    assert summary(server, app_key, "model", limit=0)["pagination"]["limit"] == 1  # clamped
    assert summary(server, app_key, "model", limit=9999)["pagination"]["limit"] == 1000
    bad(get(server, app_key, "/usage/summary", group_by="model", offset=100001), "offset")


def test_cost_is_a_rounded_sum(server: Server, app_key: str) -> None:
    at = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(hours=1)
    store_rows(server, [usage_row(app_key, at, cost=0.1) for _ in range(3)])
    assert summary(server, app_key, "model")["data"][0]["cost_usd"] == 0.3  # not 0.30000000000000004


def test_group_by_day_over_rollup_and_ragged_ends(server: Server, app_key: str) -> None:
    start = datetime(2025, 6, 1, 18, 30)  # a window starting and ending mid-day
    stamps = [datetime(2025, 6, 1, 12), datetime(2025, 6, 1, 18, 30), datetime(2025, 6, 1, 23, 59),
              datetime(2025, 6, 2, 0, 0), datetime(2025, 6, 2, 13), datetime(2025, 6, 3, 1),
              datetime(2025, 6, 4, 9, 59), datetime(2025, 6, 4, 10)]
    store_rows(server, [usage_row(app_key, at, prompt=i + 1, cost=0.01 * (i + 1)) for i, at in enumerate(stamps)])
    body = summary(server, app_key, "day", from_="2025-06-01T18:30:00Z", to="2025-06-04T10:00:00Z")
    days = {k: (v["requests"], v["prompt_tokens"]) for k, v in by_value(body).items()}
    assert days == {"2025-06-01": (2, 2 + 3), "2025-06-02": (2, 4 + 5), "2025-06-03": (1, 6), "2025-06-04": (1, 7)}
    assert [r["group_value"] for r in body["data"]] == ["2025-06-02", "2025-06-04", "2025-06-03", "2025-06-01"]
    assert body["pagination"]["from"] == "2025-06-01T18:30:00Z" and body["pagination"]["to"] == "2025-06-04T10:00:00Z"
    # the same window as one total, and whole days only
    total = summary(server, app_key, "key_id", from_=start.isoformat() + "Z", to="2025-06-04T10:00:00Z")["data"]
    assert [(r["requests"], r["prompt_tokens"]) for r in total] == [(6, 2 + 3 + 4 + 5 + 6 + 7)]
    whole = by_value(summary(server, app_key, "day", from_="2025-06-02", to="2025-06-04"))
    assert {k: v["requests"] for k, v in whole.items()} == {"2025-06-02": 2, "2025-06-03": 1}
    # a window inside one day reads rows only
    inside = summary(server, app_key, "day", from_="2025-06-02T00:00:00Z", to="2025-06-02T12:59:59Z")
    assert [(r["group_value"], r["requests"]) for r in inside["data"]] == [("2025-06-02", 1)]


def test_summary_matches_the_rows_over_a_long_window(server: Server, app_key: str) -> None:
    base = datetime(2024, 1, 1, 7, 13)
    rows = [usage_row(app_key, base + timedelta(hours=37 * i), model=("m-x", "m-y")[i % 2],
                      workspace=("chat", "embeddings", "rerank")[i % 3], prompt=i, completion=i % 7,
                      cost=0.001 * (i % 5), metadata={"env": ("prod", "dev")[i % 2]} if i % 4 else None,
                      user_id=None if i % 3 else "42") for i in range(240)]
    store_rows(server, rows)
    # windows cut at months, days, hours and minutes: every rollup span and the raw ends
    for start, end in ((datetime(2024, 1, 3, 5), datetime(2024, 12, 30, 17, 45)),
                       (datetime(2024, 3, 5, 5, 17), datetime(2024, 3, 9, 11, 59, 30)),
                       (datetime(2024, 3, 5, 5, 17), datetime(2024, 3, 5, 23)),
                       (datetime(2024, 2, 1), datetime(2024, 5, 1))):
        _check_window(server, app_key, rows, start, end)


def _check_window(server: Server, key: str, rows: list[dict[str, Any]], start: datetime, end: datetime) -> None:
    window = {"from_": start.isoformat() + "Z", "to": end.isoformat() + "Z"}
    inside = [r for r in rows if start <= r["created_at"] < end]
    for group_by, value in (("model", lambda r: r["model"]), ("workspace", lambda r: r["workspace"]),
                            ("day", lambda r: r["created_at"].date().isoformat()),
                            ("metadata.env", lambda r: r["metadata"] and r["metadata"].split('"')[3])):
        expected: dict[Any, list[int]] = {}
        for r in inside:
            totals = expected.setdefault(value(r) or None, [0, 0, 0])
            totals[0] += 1
            totals[1] += r["prompt_tokens"]
            totals[2] += r["completion_tokens"]
        got = by_value(summary(server, key, group_by, limit=1000, **window))
        assert {k: [v["requests"], v["prompt_tokens"], v["completion_tokens"]] for k, v in got.items()} == expected, (
            start, end, group_by)


def test_group_by_metadata_tag_has_a_null_bucket(server: Server, app_key: str, chat: Any) -> None:
    chat(metadata={"feature": "search", "env": "prod"})
    chat(metadata={"feature": "search"})
    chat(metadata={"feature": "autocomplete"})
    chat(metadata={"env": "prod"})
    chat()
    groups = by_value(summary(server, app_key, "metadata.feature"))
    assert {k: v["requests"] for k, v in groups.items()} == {"search": 2, "autocomplete": 1, None: 2}
    env = by_value(summary(server, app_key, "metadata.env", metadata={"feature": "search"}))
    assert {k: v["requests"] for k, v in env.items()} == {"prod": 1, None: 1}
    odd = by_value(summary(server, app_key, "metadata.no such tag"))
    assert {k: v["requests"] for k, v in odd.items()} == {None: 5}


def test_metadata_tag_keys_with_dots_and_quotes(server: Server, app_key: str, chat: Any) -> None:
    chat(metadata={"a.b": "dotted", 'say "hi"': "quoted"})
    chat(metadata={"a": "plain"})
    assert {r["group_value"] for r in summary(server, app_key, "metadata.a.b")["data"]} == {"dotted", None}
    assert {r["group_value"] for r in summary(server, app_key, 'metadata.say "hi"')["data"]} == {"quoted", None}
    assert len(ok(get(server, app_key, metadata={'say "hi"': "quoted"}))["data"]) == 1


def test_key_id_and_user_id_collapse_to_the_caller(server: Server, app_key: str, chat: Any) -> None:
    chat()
    chat(model="mock-small")
    for group_by in ("key_id", "user_id"):
        data = summary(server, app_key, group_by)["data"]
        assert len(data) == 1 and data[0]["requests"] == 2
        assert data[0]["group_value"] == app_key.split(":")[0]
    owned = server.create_key(user_email="ann@example.com")
    httpx.post(server.v1 + "/chat/completions", headers=auth(owned),
               json={"model": "mock-chat", "messages": [{"role": "user", "content": "x"}]}).raise_for_status()
    user_id = ok(get(server, owned))["data"][0]["user_id"]
    assert user_id is not None
    assert [r["group_value"] for r in summary(server, owned, "user_id")["data"]] == [user_id]


def test_filters_apply_to_summaries(server: Server, app_key: str, chat: Any) -> None:
    chat(metadata={"env": "prod"})
    chat(model="mock-small", metadata={"env": "dev"})
    assert [r["group_value"] for r in summary(server, app_key, "model", model="mock-small")["data"]] == ["mock-small"]
    assert [r["group_value"] for r in summary(server, app_key, "model", metadata={"env": "prod"})["data"]] == [
        "mock-chat"]
    assert summary(server, app_key, "model", workspace="embeddings")["data"] == []
    assert [r["requests"] for r in summary(server, app_key, "workspace", deployment="mock-chat")["data"]] == [1]
    bad(get(server, app_key, "/usage/summary", group_by="model", metadata="[1]"), "metadata")


def test_group_by_errors_and_window_cap(server: Server, app_key: str) -> None:
    bad(get(server, app_key, "/usage/summary"), "group_by")
    for value in ("models", "deployment", "metadata.", "metadata", "team_id", "MODEL"):
        bad(get(server, app_key, "/usage/summary", group_by=value), "group_by")
    ok(get(server, app_key, "/usage/summary", group_by="day", from_="2024-01-01", to="2025-01-01"))  # 366 days
    bad(get(server, app_key, "/usage/summary", group_by="day", from_="2024-01-01", to="2025-01-01T00:00:01Z"))
    bad(get(server, app_key, "/usage/summary", group_by="model", from_="2023-01-01", to="2025-01-01"))
    bad(get(server, app_key, "/usage/summary", group_by="model", from_="2025-01-02", to="2025-01-01"), "to")
    bad(get(server, app_key, "/usage/summary", group_by="model", from_="soon"), "from")
    # the plain listing has no window cap
    ok(get(server, app_key, from_="2020-01-01", to="2025-01-01"))

"""GET /v1/usage: the calling key's rows, newest first, filtered, windowed and paged (spec: usage query)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import httpx

from tests.harness import Server, auth
from tests.usage.conftest import bad, get, ok, store_rows, usage_row

ROW_FIELDS = {"id", "org", "deployment", "key_id", "user_id", "model", "workspace", "prompt_tokens",
              "completion_tokens", "cached_prompt_tokens", "latency_ms", "status_code", "cost_usd", "created_at",
              "team_id", "team", "metadata", "guardrail", "cache_hit", "saved_usd"}


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse(moment: str) -> datetime:
    assert moment.endswith("Z"), moment
    return datetime.fromisoformat(moment[:-1])


def test_rows_of_real_calls_have_the_spec_fields(server: Server, app_key: str, chat: Any) -> None:
    chat(metadata={"env": "prod", "team": "a"})
    chat(model="mock-small")
    body = ok(get(server, app_key))
    rows = body["data"]
    assert len(rows) == 2
    newest, oldest = rows
    assert all(set(r) == ROW_FIELDS for r in rows)
    assert newest["model"] == "mock-small" and oldest["model"] == "mock-chat"  # newest first
    assert newest["id"] > oldest["id"] and parse(newest["created_at"]) >= parse(oldest["created_at"])
    assert oldest["metadata"] == {"env": "prod", "team": "a"} and newest["metadata"] is None
    assert oldest["key_id"] == app_key.split(":")[0] and oldest["workspace"] == "chat"
    assert oldest["deployment"] == "mock-chat" and oldest["status_code"] == 200 and oldest["team_id"] is None
    assert oldest["team"] is None
    assert oldest["prompt_tokens"] > 0 and oldest["completion_tokens"] > 0 and oldest["cost_usd"] > 0
    assert isinstance(oldest["latency_ms"], int) and isinstance(oldest["id"], int)
    assert abs(parse(oldest["created_at"]) - now()) < timedelta(minutes=5)
    stored = server.usage_rows(app_key)
    assert [r["id"] for r in stored] == [oldest["id"], newest["id"]]


def test_rows_belong_only_to_the_calling_key(server: Server, app_key: str, chat: Any) -> None:
    chat()
    other = server.create_key()
    assert ok(get(server, other))["data"] == []
    httpx.post(server.v1 + "/chat/completions", headers=auth(other),
               json={"model": "mock-chat", "messages": [{"role": "user", "content": "x"}]}).raise_for_status()
    mine, theirs = ok(get(server, app_key))["data"], ok(get(server, other))["data"]
    assert len(mine) == 1 and len(theirs) == 1 and mine[0]["id"] != theirs[0]["id"]
    # org, key_id, user_id, team, team_id are accepted and ignored: still only the caller's rows
    spoofed = ok(get(server, app_key, key_id=other.split(":")[0], org="someone", user_id="7", team_id="3",
                     team="nobody"))
    assert [r["id"] for r in spoofed["data"]] == [mine[0]["id"]]


def test_filters_model_workspace_deployment(server: Server, app_key: str, chat: Any) -> None:
    chat()
    chat(model="mock-small")
    embedded = httpx.post(server.v1 + "/embeddings", headers=auth(app_key), json={"model": "mock-embed", "input": "x"})
    assert embedded.status_code == 200, embedded.text
    assert {r["model"] for r in ok(get(server, app_key, model="mock-small"))["data"]} == {"mock-small"}
    assert len(ok(get(server, app_key, model="mock-small"))["data"]) == 1
    assert [r["model"] for r in ok(get(server, app_key, workspace="embeddings"))["data"]] == ["mock-embed"]
    assert len(ok(get(server, app_key, workspace="chat"))["data"]) == 2
    assert [r["model"] for r in ok(get(server, app_key, deployment="mock-chat"))["data"]] == ["mock-chat"]
    assert ok(get(server, app_key, model="mock-chat", workspace="embeddings"))["data"] == []
    assert ok(get(server, app_key, model="no-such-model"))["data"] == []


def test_metadata_filter_is_containment_with_keys_anded(server: Server, app_key: str, chat: Any) -> None:
    chat(metadata={"env": "prod", "team": "a"})
    chat(metadata={"env": "prod"})
    chat(metadata={"env": "dev", "team": "a"})
    chat()

    def tags(**params: Any) -> list[Any]:
        return sorted((r["metadata"] or {}).get("env", "-") + (r["metadata"] or {}).get("team", "")
                      for r in ok(get(server, app_key, **params))["data"])

    assert tags(metadata={"env": "prod"}) == ["prod", "proda"]
    assert tags(metadata={"env": "prod", "team": "a"}) == ["proda"]
    assert tags(metadata={"team": "a"}) == ["deva", "proda"]
    assert tags(metadata={"env": "staging"}) == []
    assert len(tags(metadata={})) == 4  # the empty object is no filter
    assert tags(metadata={"env": "prod"}, model="mock-small") == []


def test_metadata_filter_errors(server: Server, app_key: str) -> None:
    bad(get(server, app_key, metadata="{not json"), "metadata")
    bad(get(server, app_key, metadata=["env", "prod"]), "metadata")
    bad(get(server, app_key, metadata='"prod"'), "metadata")
    bad(get(server, app_key, metadata={"env": 1}), "metadata")
    bad(get(server, app_key, metadata={"env": None}), "metadata")
    bad(get(server, app_key, metadata={"env": {"x": "y"}}), "metadata")


def test_window_bounds_formats_and_defaults(server: Server, app_key: str) -> None:
    day = datetime(2025, 3, 10)
    store_rows(server, [usage_row(app_key, day, prompt=1),  # exactly at `from`: included
                        usage_row(app_key, day + timedelta(hours=12), prompt=2),
                        usage_row(app_key, day + timedelta(days=1), prompt=3),  # exactly at `to`: excluded
                        usage_row(app_key, now() - timedelta(days=31), prompt=4),  # outside the default window
                        usage_row(app_key, now() - timedelta(days=29), prompt=5)])
    by_date = ok(get(server, app_key, from_="2025-03-10", to="2025-03-11"))
    assert [r["prompt_tokens"] for r in by_date["data"]] == [2, 1]
    assert by_date["pagination"]["from"] == "2025-03-10T00:00:00Z"
    assert by_date["pagination"]["to"] == "2025-03-11T00:00:00Z"
    by_time = ok(get(server, app_key, from_="2025-03-10T12:00:00Z", to="2025-03-11T00:00:00.000001Z"))
    assert [r["prompt_tokens"] for r in by_time["data"]] == [3, 2]
    offset_zone = ok(get(server, app_key, from_="2025-03-10T14:00:00+02:00", to="2025-03-10T15:00:00+02:00"))
    assert [r["prompt_tokens"] for r in offset_zone["data"]] == [2]  # 12:00Z inclusive
    assert offset_zone["pagination"]["from"] == "2025-03-10T12:00:00Z"
    default = ok(get(server, app_key))
    assert [r["prompt_tokens"] for r in default["data"]] == [5]
    window = default["pagination"]
    assert parse(window["to"]) - parse(window["from"]) == timedelta(days=30)
    assert abs(parse(window["to"]) - now()) < timedelta(minutes=1)
    only_from = ok(get(server, app_key, from_="2025-03-10"))
    assert [r["prompt_tokens"] for r in only_from["data"]] == [5, 4, 3, 2, 1]


def test_window_errors(server: Server, app_key: str) -> None:
    bad(get(server, app_key, from_="2025-03-10", to="2025-03-10"), "to")  # to must be strictly after from
    bad(get(server, app_key, from_="2025-03-11", to="2025-03-10"), "to")
    bad(get(server, app_key, to="2020-01-01"), "to")  # before the default from (now minus 30 days)
    for value in ("yesterday", "2025-13-01", "2025-02-30", "10/03/2025", "2025-03-10T25:00:00Z", "1741564800"):
        bad(get(server, app_key, from_=value), "from")
    bad(get(server, app_key, to="2025-03-10T00:00:00+99:00"), "to")


def test_limit_is_clamped_and_offset_capped(server: Server, app_key: str) -> None:
    base = now() - timedelta(days=1)
    store_rows(server, [usage_row(app_key, base + timedelta(seconds=i), prompt=i) for i in range(5)])
    assert ok(get(server, app_key))["pagination"]["limit"] == 100
    low = ok(get(server, app_key, limit=0))
    assert low["pagination"]["limit"] == 1 and len(low["data"]) == 1
    assert ok(get(server, app_key, limit=-3))["pagination"]["limit"] == 1
    assert ok(get(server, app_key, limit=5000))["pagination"]["limit"] == 1000
    bad(get(server, app_key, limit="ten"), "limit")
    assert ok(get(server, app_key, offset=100000))["data"] == []
    bad(get(server, app_key, offset=100001), "offset")
    bad(get(server, app_key, offset=-1), "offset")
    bad(get(server, app_key, offset="1.5"), "offset")


def test_paging_and_has_more(server: Server, app_key: str) -> None:
    base = now() - timedelta(hours=3)
    # two rows share a timestamp: pages still neither overlap nor skip
    stamps = [base + timedelta(seconds=i) for i in range(4)] + [base + timedelta(seconds=3)]
    store_rows(server, [usage_row(app_key, stamp, prompt=i) for i, stamp in enumerate(stamps)])
    everything = ok(get(server, app_key))["data"]
    assert len(everything) == 5
    pages = [ok(get(server, app_key, limit=2, offset=offset)) for offset in (0, 2, 4)]
    assert [p["pagination"]["has_more"] for p in pages] == [True, True, False]
    assert [p["pagination"]["offset"] for p in pages] == [0, 2, 4]
    assert [r["id"] for p in pages for r in p["data"]] == [r["id"] for r in everything]
    exact = ok(get(server, app_key, limit=5))
    assert len(exact["data"]) == 5 and exact["pagination"]["has_more"] is True  # exactly `limit` rows
    assert ok(get(server, app_key, limit=6))["pagination"]["has_more"] is False


def test_keys_allowed_on_usage(server: Server, app_key: str, chat: Any) -> None:
    assert get(server, "IFDKNOPE:nope").status_code == 401
    user_key = server.create_user_key(app_key)
    refused = get(server, user_key)
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
    assert get(server, user_key, "/usage/summary", group_by="model").status_code == 403
    admin = server.create_key(key_type="admin")
    assert ok(get(server, admin))["data"] == []
    # usage never answers 402: a key over its budget still reads its report
    broke = server.create_key(budget_usd=0.0)
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(broke),
                      json={"model": "mock-chat", "messages": [{"role": "user", "content": "x"}]}).status_code == 402
    ok(get(server, broke))
    ok(get(server, broke, "/usage/summary", group_by="model"))


def test_deep_pages_with_metadata_or_deployment_filters(server: Server, app_key: str) -> None:
    # over a thousand matching rows across days: deep offsets skip whole days by their rollup counts
    base = datetime(2025, 9, 1, 6, 45)
    rows = [usage_row(app_key, base + timedelta(minutes=17 * i), prompt=i,
                      metadata={"feature": ("agent", "search", "agent")[i % 3]} if i % 5 else None,
                      deployment=("dep-a", "dep-b")[i % 2]) for i in range(3000)]
    store_rows(server, rows)
    window = {"from_": "2025-09-01T12:00:00Z", "to": "2025-09-30T13:30:00Z"}
    start, end = datetime(2025, 9, 1, 12), datetime(2025, 9, 30, 13, 30)
    inside = [r for r in reversed(rows) if start <= r["created_at"] < end]

    def expected(keep: Any, offset: int, limit: int) -> list[int]:
        return [r["prompt_tokens"] for r in inside if keep(r)][offset:offset + limit]

    agent = [r for r in inside if r["metadata"] and "agent" in r["metadata"]]
    assert len(agent) > 1100
    for offset in (0, 999, 1000, 1001, len(agent) - 3, len(agent), len(agent) + 50):
        page = ok(get(server, app_key, metadata={"feature": "agent"}, offset=offset, limit=7, **window))
        assert [r["prompt_tokens"] for r in page["data"]] == expected(
            lambda r: r["metadata"] and "agent" in r["metadata"], offset, 7), offset
    for offset in (1000, 1234, 1400):
        page = ok(get(server, app_key, deployment="dep-b", offset=offset, limit=50, **window))
        assert [r["prompt_tokens"] for r in page["data"]] == expected(lambda r: r["deployment"] == "dep-b", offset, 50)
        both = ok(get(server, app_key, deployment="dep-b", metadata={"feature": "search"}, offset=offset - 600,
                      limit=20, **window))
        assert [r["prompt_tokens"] for r in both["data"]] == expected(
            lambda r: r["deployment"] == "dep-b" and r["metadata"] and "search" in r["metadata"], offset - 600, 20)


def test_usage_calls_count_once_against_the_rate_limit(server: Server) -> None:
    key = server.create_key(rpm=4)
    assert [get(server, key).status_code, get(server, key, "/usage/summary", group_by="model").status_code,
            get(server, key).status_code, get(server, key, "/usage/summary", group_by="day").status_code] == [200] * 4
    limited = get(server, key)
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(limited.headers["Retry-After"]) >= 1


def test_deep_filtered_pages_in_a_window_shorter_than_a_day_or_two(server: Server, app_key: str) -> None:
    base = datetime(2025, 10, 1, 20, 0, 5)
    rows = [usage_row(app_key, base + timedelta(seconds=50 * i), prompt=i,
                      metadata={"feature": "agent"} if i % 5 else {"feature": "other"}) for i in range(2100)]
    store_rows(server, rows)
    for start, end in ((datetime(2025, 10, 1, 20, 30), datetime(2025, 10, 2, 23, 10)),  # crosses midnight
                       (datetime(2025, 10, 2, 0, 0), datetime(2025, 10, 2, 23, 59, 59))):  # hours only
        window = {"from_": start.isoformat() + "Z", "to": end.isoformat() + "Z"}
        inside = [r["prompt_tokens"] for r in reversed(rows)
                  if start <= r["created_at"] < end and "agent" in r["metadata"]]
        assert len(inside) > 1050
        for offset in (1000, 1013, 1049, len(inside) - 1, len(inside)):
            page = ok(get(server, app_key, metadata={"feature": "agent"}, offset=offset, limit=9, **window))
            assert [r["prompt_tokens"] for r in page["data"]] == inside[offset:offset + 9], (start, offset)

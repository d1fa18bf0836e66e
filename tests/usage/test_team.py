"""Usage by team: rows carry `team_id` and `team` (the name), the summary
groups by the team a row was charged under, and an admin key filters by `team` (404 for a team its
org does not have) or `team_id`. Teams are made directly in the database: this file tests usage,
not the team commands."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
from sqlalchemy import text, update

from inferd.store.db import utcnow
from inferd.store.key_cache import KEYS_CHANNEL
from inferd.store.tables import api_keys, teams
from tests.harness import Server, auth, on_database
from tests.usage.conftest import bad, get, ok, store_rows, usage_row

SUMS = ("requests", "prompt_tokens", "completion_tokens", "cost_usd")


def make_team(server: Server, org_key: str, name: str) -> int:
    """A team called `name` in the org of `org_key`; its id."""
    org_id = server.key_row(org_key)["org_id"]

    async def work(engine: Any) -> int:
        async with engine.begin() as conn:
            made = await conn.execute(teams.insert().values(org_id=org_id, name=name, created_at=utcnow())
                                      .returning(teams.c.id))
            return int(made.scalar_one())

    return int(on_database(server.backend, work))


def set_team(server: Server, full_key: str, team_id: int | None) -> None:
    """Put a key in a team, as `keys update --team` will; on PostgreSQL the servers' key caches
    are told (SQLite's notice the write by themselves)."""

    async def work(engine: Any) -> None:
        async with engine.begin() as conn:
            await conn.execute(update(api_keys).where(api_keys.c.access_key_id == full_key.split(":")[0])
                               .values(team_id=team_id))
            if engine.dialect.name == "postgresql":
                await conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": KEYS_CHANNEL})

    on_database(server.backend, work)


def call(server: Server, key: str, model: str = "mock-chat") -> None:
    """One metered chat completion."""
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(key), timeout=30,
                          json={"model": model, "messages": [{"role": "user", "content": "hello there"}]})
    assert response.status_code == 200, response.text


def by_team(server: Server, key: str, **params: Any) -> dict[str | None, dict[str, Any]]:
    """The summary grouped by team: group value -> its row."""
    body = ok(get(server, key, "/usage/summary", group_by="team", **params))
    assert body["group_by"] == "team"
    return {group["group_value"]: group for group in body["data"]}


def expected(server: Server, keys: list[str], names: dict[int | None, str | None]) -> dict[str | None, dict[str, Any]]:
    """What a summary by team should hold, summed here from the stored rows of `keys`."""
    totals: dict[str | None, dict[str, Any]] = {}
    for key in keys:
        for row in server.usage_rows(key):
            group = totals.setdefault(names[row["team_id"]], dict.fromkeys(SUMS, 0))
            group["requests"] += 1
            for name in SUMS[1:]:
                group[name] += row[name]
    return totals


def assert_sums(got: dict[str | None, dict[str, Any]], want: dict[str | None, dict[str, Any]]) -> None:
    """The summary's groups and their sums are those of the rows."""
    assert set(got) == set(want), (got, want)
    for value, sums in want.items():
        group = got[value]
        assert group["requests"] == sums["requests"], (value, group, sums)
        assert group["prompt_tokens"] == sums["prompt_tokens"]
        assert group["completion_tokens"] == sums["completion_tokens"]
        assert group["total_tokens"] == sums["prompt_tokens"] + sums["completion_tokens"]
        assert abs(group["cost_usd"] - sums["cost_usd"]) < 1e-9


def fresh_org(server: Server) -> tuple[str, str]:
    """A new org's slug and its admin key."""
    slug = f"teams-{uuid.uuid4().hex[:8]}"
    return slug, server.create_key(org=slug, key_type="admin")


def test_rows_carry_the_team_and_the_summary_groups_by_it(server: Server) -> None:
    slug, admin = fresh_org(server)
    red_key, blue_key, loose = (server.create_key(org=slug) for _ in range(3))
    red, blue = make_team(server, admin, "red"), make_team(server, admin, "blue")
    set_team(server, red_key, red)  # before the server first sees the keys
    set_team(server, blue_key, blue)
    for key, model in ((red_key, "mock-chat"), (red_key, "mock-small"), (blue_key, "mock-chat"), (loose, "mock-chat")):
        call(server, key, model)

    rows = ok(get(server, red_key))["data"]
    assert len(rows) == 2 and all(r["team_id"] == red and r["team"] == "red" for r in rows)
    assert [(r["team_id"], r["team"]) for r in ok(get(server, loose))["data"]] == [(None, None)]

    names = {red: "red", blue: "blue", None: None}
    keys = [red_key, blue_key, loose]
    assert_sums(by_team(server, admin), expected(server, keys, names))
    assert {v: g["requests"] for v, g in by_team(server, admin).items()} == {"red": 2, "blue": 1, None: 1}
    # A self-scoped key sees its own rows, under the team they were charged to.
    assert_sums(by_team(server, red_key), expected(server, [red_key], names))
    assert list(by_team(server, loose)) == [None]

    # The admin filters by team name, or by the rows' team_id.
    assert {r["key_id"] for r in ok(get(server, admin, team="red"))["data"]} == {red_key.split(":")[0]}
    assert len(ok(get(server, admin, team="red"))["data"]) == 2
    assert [r["team"] for r in ok(get(server, admin, team_id=str(blue)))["data"]] == ["blue"]
    models = ok(get(server, admin, "/usage/summary", group_by="model", team="red"))["data"]
    assert sorted((g["group_value"], g["requests"]) for g in models) == [("mock-chat", 1), ("mock-small", 1)]
    assert list(by_team(server, admin, team="blue")) == ["blue"]
    assert ok(get(server, admin, team="red", team_id=str(blue)))["data"] == []  # exclusive filters: nothing
    assert ok(get(server, admin, team_id="99999999999"))["data"] == []  # past the column: no team
    bad(get(server, admin, team_id="red"), "team_id")
    # A self-scoped key's team filters are ignored: it only ever sees its own rows.
    assert len(ok(get(server, red_key, team="blue"))["data"]) == 2


def test_an_unknown_team_is_404_for_an_admin(server: Server) -> None:
    slug, admin = fresh_org(server)
    _, elsewhere = fresh_org(server)
    make_team(server, elsewhere, "green")  # another org's team is no team of this org
    for path, params in (("/usage", {}), ("/usage/summary", {"group_by": "team"})):
        for name in ("nope", "green"):
            response = get(server, admin, path, team=name, **params)
            assert response.status_code == 404, response.text
            body = response.json()
            assert set(body) == {"error"}
            error = body["error"]
            assert error["type"] == "not_found_error" and error["param"] == "team" and name in error["message"]


def test_a_key_moved_to_another_team_leaves_its_history_with_the_old_one(server: Server) -> None:
    slug, admin = fresh_org(server)
    key = server.create_key(org=slug)
    red, blue = make_team(server, admin, "red"), make_team(server, admin, "blue")
    set_team(server, key, red)
    call(server, key)
    call(server, key)
    set_team(server, key, blue)
    # On PostgreSQL the servers hear the change a moment later: call until a row lands in blue.
    for _ in range(100):
        call(server, key)
        if server.usage_rows(key)[-1]["team_id"] == blue:
            break
    stored = server.usage_rows(key)
    assert [r["team_id"] for r in stored[:2]] == [red, red] and stored[-1]["team_id"] == blue

    got = by_team(server, admin)
    assert_sums(got, expected(server, [key], {red: "red", blue: "blue"}))
    assert got["red"]["requests"] >= 2 and got["blue"]["requests"] >= 1  # not all under the key's team now
    listed = ok(get(server, admin))["data"]
    assert [r["team"] for r in listed][-2:] == ["red", "red"] and listed[0]["team"] == "blue"
    assert [r["id"] for r in ok(get(server, admin, team="red"))["data"]] == [
        r["id"] for r in reversed(stored) if r["team_id"] == red]


def test_summary_by_team_over_whole_days_reads_the_rows(server: Server) -> None:
    """Whole months, days and hours of other groupings come from the rollup, which knows no teams:
    a long window by team still counts each row under its own team (and a deleted team's rows
    under null, with their team_id kept in the listing)."""
    slug, admin = fresh_org(server)
    key = server.create_key(org=slug)
    red = make_team(server, admin, "red")
    gone = 2_000_000_000  # a team id no team has (as after a delete)
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    rows = []
    for days, team, cost in ((40, red, 0.5), (41, None, 0.25), (20, red, 0.125), (10, gone, 0.0625)):
        row = usage_row(key, now - timedelta(days=days, hours=3), cost=cost)
        row["team_id"] = team
        rows.append(row)
    store_rows(server, rows)
    start = (now - timedelta(days=60)).strftime("%Y-%m-%d")

    got = by_team(server, admin, from_=start)
    assert {v: (g["requests"], g["cost_usd"]) for v, g in got.items()} == {"red": (2, 0.625), None: (2, 0.3125)}
    # Other groupings over the same window (from the rollup) see the same totals.
    models = ok(get(server, admin, "/usage/summary", group_by="model", from_=start))["data"]
    assert [(g["requests"], g["cost_usd"]) for g in models] == [(4, 0.9375)]
    assert sum(g["requests"] for g in by_team(server, admin, from_=start, team="red").values()) == 2
    listed = ok(get(server, admin, from_=start))["data"]
    assert [(r["team_id"], r["team"]) for r in listed] == [(gone, None), (red, "red"), (red, "red"), (None, None)]

"""Budget alerts (issue 28): with `[alerts]`, the first call that takes a
budget past 50%, 80% or 100% of it in a period brings one signed POST to the webhook, whatever the
number of replicas, and a receiver that was down while the server restarted still gets each one.

The receiver is a real HTTP server on loopback (receiver.py); the servers are `inferd serve`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from sqlalchemy import select

from inferd.config import load_catalogue
from inferd.engines.registry import default_registry
from inferd.errors import ConfigError
from inferd.store.alerts import AlertRepository
from inferd.store.db import create_engine, utcnow
from inferd.store.tables import alerts, teams
from tests.alerts.receiver import Delivery, Receiver
from tests.conftest import MODELS_TOML
from tests.harness import Backend, Server, Upstream, auth, on_database, write_config
from tests.limits.governance import make_team, new_org, set_key, set_org

SECRET = "whsec-test-0123456789abcdef"
BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
BUDGET_CALLS = 2.45  # a budget of this many calls: 1 call is 41%, 2 are 82%, 3 are 122%
QUIET_S = 1.0  # five sweeps of each server: long enough for an extra alert to show
OUTAGE_S = 30.0  # how long the receiver is down in the restart test (issue 28)


def alerts_table(url: str) -> str:
    """`[alerts]` posting to `url`, sweeping and retrying quickly (the defaults are 2 s and 1 s)."""
    return (f'\n[alerts]\nwebhook_url = "{url}"\nsecret = "{SECRET}"\ncheck_interval_s = 0.2\n'
            "retry_base_s = 0.2\nretry_max_s = 2\n")


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on a free loopback port, answering 200."""
    hook = Receiver().start()
    try:
        yield hook
    finally:
        hook.stop()


def alerting_config(folder: Path, upstream: Upstream, receiver: Receiver) -> Path:
    """The test catalogue with `[alerts]` pointing at `receiver`."""
    return write_config(folder / "inferd.toml", MODELS_TOML + alerts_table(receiver.url), upstream)


def call(server: Server, key: str) -> None:
    """One priced chat call, which must succeed."""
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY, timeout=30)
    assert response.status_code == 200, response.text


def one_call_cost(server: Server) -> float:
    """What one `call` costs, measured with a key of its own (no budget: no alert)."""
    probe = server.create_key()
    call(server, probe)
    return float(server.usage_rows(probe)[0]["cost_usd"])


def of_key(key: str) -> Callable[[dict[str, Any]], bool]:
    """Matches the alerts of a key's own budget."""
    key_id = key.split(":")[0]
    return lambda body: body["scope"] == "key" and body["access_key_id"] == key_id


def thresholds(deliveries: list[Delivery]) -> list[float]:
    """The thresholds of deliveries, sorted."""
    return sorted(d.json()["threshold"] for d in deliveries)


def assert_signed(delivery: Delivery) -> None:
    """The delivery is a JSON POST whose signature is the body's HMAC-SHA256 with the secret."""
    expected = "sha256=" + hmac.new(SECRET.encode(), delivery.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(delivery.headers["x-inferd-signature"], expected)
    assert delivery.headers["content-type"] == "application/json"
    assert delivery.path == "/hooks/inferd"


def stored_alerts(backend: Backend, owner: str) -> list[dict[str, Any]]:
    """The queue's rows of one owner."""

    async def work(engine: Any) -> list[dict[str, Any]]:
        async with engine.connect() as conn:
            rows = await conn.execute(select(alerts).where(alerts.c.owner == owner).order_by(alerts.c.threshold))
            return [dict(r) for r in rows.mappings()]

    return list(on_database(backend, work))


def test_key_budget_alerts_once_per_threshold(tmp_path: Path, backend: Backend, upstream: Upstream,
                                              receiver: Receiver) -> None:
    server = Server.start(tmp_path, backend, alerting_config(tmp_path, upstream, receiver))
    try:
        cost = one_call_cost(server)
        org = new_org()
        key = server.create_key(org=org, budget_usd=cost * BUDGET_CALLS)
        mine = of_key(key)
        call(server, key)  # 41%: nothing yet
        time.sleep(QUIET_S)
        assert [d for d in receiver.deliveries if mine(d.json())] == []
        call(server, key)  # 82%: past 50 and 80
        receiver.wait_for(2, mine)
        time.sleep(QUIET_S)
        assert thresholds(receiver.answered(where=mine)) == [0.5, 0.8]
        call(server, key)  # 122%: past 100
        receiver.wait_for(3, mine)
        time.sleep(QUIET_S)
        got = receiver.answered(where=mine)
        assert thresholds(got) == [0.5, 0.8, 1.0]
        assert len(receiver.deliveries) == len(receiver.answered())  # every POST was answered 200 at once
    finally:
        server.stop()
    month_start = datetime.now(timezone.utc).date().replace(day=1).isoformat()
    by_threshold = {d.json()["threshold"]: d.json() for d in got}
    for delivery in got:
        assert_signed(delivery)
    for threshold, calls in ((0.5, 2), (0.8, 2), (1.0, 3)):
        body = by_threshold[threshold]
        assert body["spend_usd"] == pytest.approx(cost * calls)
        assert {k: v for k, v in body.items() if k not in ("id", "spend_usd", "created_at")} == {
            "type": "budget.threshold", "scope": "key", "org": org, "team": None,
            "access_key_id": key.split(":")[0], "threshold": threshold,
            "budget_usd": pytest.approx(cost * BUDGET_CALLS), "period": "month", "period_start": month_start}
    assert len({d.json()["id"] for d in got}) == 3
    rows = stored_alerts(backend, key.split(":")[0])
    assert [(r["threshold"], r["attempts"], r["failed_at"]) for r in rows] == [(50, 1, None), (80, 1, None),
                                                                               (100, 1, None)]
    assert all(r["delivered_at"] is not None and r["next_attempt_at"] is None for r in rows)


def test_two_replicas_send_one_post_per_threshold(tmp_path: Path, backend: Backend, upstream: Upstream,
                                                  receiver: Receiver) -> None:
    """A team's and an org's budgets spent through both replicas: each crossing once."""
    config = alerting_config(tmp_path, upstream, receiver)
    servers: list[Server] = []
    try:
        for _ in range(2):  # one database, one data dir (replicas share it)
            servers.append(Server.start(tmp_path, backend, config))
        cost = one_call_cost(servers[0])
        org = new_org()
        key = servers[0].create_key(org=org)
        team_id = make_team(servers[0], org, budget_usd=cost * BUDGET_CALLS, budget_period="day")
        set_org(servers[0], org, budget_usd=cost * BUDGET_CALLS, budget_period="total")
        set_key(servers[0], key, team_id=team_id)
        for i in range(3):
            call(servers[i % 2], key)
        team_alerts = lambda body: body["scope"] == "team" and body["org"] == org  # noqa: E731
        org_alerts = lambda body: body["scope"] == "org" and body["org"] == org  # noqa: E731
        receiver.wait_for(3, team_alerts)
        receiver.wait_for(3, org_alerts)
        time.sleep(QUIET_S)
    finally:
        for server in servers:
            server.stop()
    team_got, org_got = receiver.answered(where=team_alerts), receiver.answered(where=org_alerts)
    assert thresholds(team_got) == thresholds(org_got) == [0.5, 0.8, 1.0]

    async def team_name(engine: Any) -> str:
        async with engine.connect() as conn:
            return str((await conn.execute(select(teams.c.name).where(teams.c.id == team_id))).scalar_one())

    name = on_database(backend, team_name)
    today = datetime.now(timezone.utc).date().isoformat()
    for delivery in team_got + org_got:
        assert_signed(delivery)
    assert {(b["team"], b["access_key_id"], b["period"], b["period_start"]) for b in (d.json() for d in team_got)} \
        == {(name, None, "day", today)}
    assert {(b["team"], b["access_key_id"], b["period"], b["period_start"]) for b in (d.json() for d in org_got)} \
        == {(None, None, "total", None)}
    for body in (d.json() for d in team_got + org_got):  # the spend seen when queued: calls came fast
        assert body["threshold"] * body["budget_usd"] <= body["spend_usd"] <= cost * 3 * (1 + 1e-9)
    assert [r["period_start"] for r in stored_alerts(backend, org)] == ["", "", ""]


def test_alerts_survive_receiver_down_and_restart(tmp_path: Path, backend: Backend, upstream: Upstream,
                                                  receiver: Receiver) -> None:
    """The receiver fails (500), then refuses connections while the server restarts; once it is
    back, each alert arrives, once, with the bytes first tried."""
    config = alerting_config(tmp_path, upstream, receiver)
    receiver.status = 500
    server = Server.start(tmp_path, backend, config)
    try:
        cost = one_call_cost(server)
        key = server.create_key(budget_usd=cost * BUDGET_CALLS)
        mine = of_key(key)
        for _ in range(3):
            call(server, key)
        failed = receiver.wait_for(3, mine, status=500)
        receiver.stop()  # down: connections refused, for OUTAGE_S in all
        down_at = time.monotonic()
        server.stop()
        queued = stored_alerts(backend, key.split(":")[0])
        assert [(r["threshold"], r["delivered_at"]) for r in queued] == [(50, None), (80, None), (100, None)]
        assert all(r["attempts"] >= 1 and r["next_attempt_at"] is not None for r in queued)
        server = Server.start(tmp_path, backend, config)
        time.sleep(max(QUIET_S, OUTAGE_S - (time.monotonic() - down_at)))  # the new server's tries are refused
        receiver.status = 200
        receiver.start()
        got = receiver.wait_for(3, mine, timeout=20)  # retry_max_s = 2: each row is tried again within 2 s
        time.sleep(QUIET_S)
        got = receiver.answered(where=mine)
    finally:
        server.stop()
    assert thresholds(got) == [0.5, 0.8, 1.0]
    for delivery in got:
        assert_signed(delivery)
    assert {d.body for d in got} == {d.body for d in failed}  # the same alerts (ids), the same bytes
    rows = stored_alerts(backend, key.split(":")[0])
    assert all(r["delivered_at"] is not None and r["failed_at"] is None for r in rows)
    assert all(r["attempts"] >= 5 for r in rows)  # tried on through the outage, never given up


def test_without_alerts_table_nothing_is_queued(server: Server, backend: Backend) -> None:
    """The session server has no `[alerts]`: a budget spent past 100% queues nothing."""
    cost = one_call_cost(server)
    key = server.create_key(budget_usd=cost * BUDGET_CALLS)
    for _ in range(3):
        call(server, key)
    time.sleep(QUIET_S)
    assert stored_alerts(backend, key.split(":")[0]) == []


def test_queue_takes_a_crossing_once_and_gives_a_row_to_one_claim(backend: Backend) -> None:
    """The queue's guarantees on the run's database, from two engines at once (two replicas): a
    crossing queued twice is one row, and of two claims of a due row one wins."""
    owner = f"queue-test-{uuid.uuid4().hex[:8]}"

    async def work(engine: Any) -> tuple[list[bool], list[bool], list[bool], list[str]]:
        other = create_engine(backend.database_url)
        try:
            repos = (AlertRepository(engine), AlertRepository(other))
            now = utcnow()
            queued = await asyncio.gather(*(repo.enqueue(f"alert_{owner}_{i}", "key", owner, "2026-11-01", 80, "{}",
                                                         now) for i, repo in enumerate(repos)))
            due = [row.id for row in await repos[0].due(now, 1000) if owner in row.id]
            claims = await asyncio.gather(*(repo.claim(due[0], now, 30.0) for repo in repos))
            again = [await repo.claim(due[0], now, 30.0) for repo in repos]  # held: nobody else
            return list(queued), list(claims), again, due
        finally:
            await other.dispose()

    queued, claims, again, due = on_database(backend, work)
    assert sorted(queued) == [False, True] and len(due) == 1
    assert sorted(claims) == [False, True]
    assert again == [False, False]
    assert [r["attempts"] for r in stored_alerts(backend, owner)] == [1]


GOOD = '[[models]]\nid = "m"\nbase_url = "http://127.0.0.1:1/v1"\n'


@pytest.mark.parametrize("table, expected", [
    ('[alerts]\nwebhook_url = "https://hooks.test/x"\nsecret = "s"\ncolour = 1\n', ["[alerts], key 'colour'",
                                                                                   "unknown key"]),
    ('[alerts]\nwebhook_url = "ftp://hooks.test/x"\nsecret = "s"\n', ["[alerts], key 'webhook_url'", "http"]),
    ('[alerts]\nwebhook_url = "https://hooks.test/x"\n', ["[alerts], key 'secret'", "missing"]),
    ('[alerts]\nwebhook_url = "https://hooks.test/x"\nsecret = "s"\ncheck_interval_s = 0\n',
     ["[alerts], key 'check_interval_s'", "positive"]),
    ('alerts = 5\n', ["[alerts]", "expected a table"]),
])
def test_alerts_table_is_checked(tmp_path: Path, table: str, expected: list[str]) -> None:
    path = tmp_path / "inferd.toml"
    path.write_text(table + GOOD, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_catalogue(path, default_registry().option_keys())
    for part in expected:
        assert part in str(caught.value)


def test_alerts_table_parsed(tmp_path: Path) -> None:
    path = tmp_path / "inferd.toml"
    path.write_text('[alerts]\nwebhook_url = "https://hooks.test/x"\nsecret = "s3cret"\nretry_base_s = 0.5\nretry_max_s = 9\n' + GOOD,
                    encoding="utf-8")
    alerting = load_catalogue(path, default_registry().option_keys()).alerts
    assert alerting is not None
    assert (alerting.webhook_url, alerting.secret, alerting.check_interval_s, alerting.retry_base_s,
            alerting.retry_max_s, alerting.retry_for_s) == ("https://hooks.test/x", "s3cret", 2.0, 0.5, 9.0, 3600.0)
    assert "s3cret" not in repr(alerting)
    path.write_text(GOOD, encoding="utf-8")
    assert load_catalogue(path, default_registry().option_keys()).alerts is None

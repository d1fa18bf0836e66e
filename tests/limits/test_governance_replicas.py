"""Team windows and budgets are exact across replicas on one Redis:
two replicas, calls spread over two keys of one team."""

from __future__ import annotations

import asyncio

import httpx

from tests.harness import Server, auth
from tests.limits.governance import make_team, new_org, set_key
from tests.test_replicas import BODY, replicas  # noqa: F401  (the fixture)


def _team_keys(server: Server, **team: object) -> list[str]:
    org = new_org()
    keys = [server.create_key(org=org) for _ in range(2)]
    team_id = make_team(server, org, **team)
    for key in keys:
        set_key(server, key, team_id=team_id)
    return keys


def _burst(replicas: list[Server], keys: list[str], count: int) -> list[httpx.Response]:  # noqa: F811
    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            return list(await asyncio.gather(*[
                client.post(replicas[i % 2].v1 + "/chat/completions", headers=auth(keys[(i // 2) % 2]), json=BODY)
                for i in range(count)]))

    return asyncio.run(fire())


def test_a_team_rpm_admits_exactly_its_limit_across_replicas_and_keys(replicas: list[Server]) -> None:  # noqa: F811
    keys = _team_keys(replicas[0], rpm=10)
    answers = _burst(replicas, keys, 30)
    assert [r.status_code for r in answers].count(200) == 10
    assert all(r.status_code == 429 and int(r.headers["Retry-After"]) >= 1 for r in answers if r.status_code != 200)
    assert len(replicas[0].usage_rows(keys[0])) + len(replicas[0].usage_rows(keys[1])) == 10


def test_a_team_tpm_admits_nothing_once_reached(replicas: list[Server]) -> None:  # noqa: F811
    keys = _team_keys(replicas[0], tpm=1)
    first = httpx.post(replicas[0].v1 + "/chat/completions", headers=auth(keys[0]), json=BODY)
    assert first.status_code == 200
    # Its tokens are in the team's window before its reply left: no later call gets in, on any
    # replica, with either key.
    answers = _burst(replicas, keys, 8)
    assert [r.status_code for r in answers] == [429] * 8
    assert all(r.headers["x-ratelimit-remaining-tokens"] == "0" for r in answers)


def test_a_team_budget_spent_through_two_keys_is_402_on_both_replicas(replicas: list[Server]) -> None:  # noqa: F811
    probe = replicas[0].create_key()
    httpx.post(replicas[0].v1 + "/chat/completions", headers=auth(probe), json=BODY).raise_for_status()
    one = replicas[0].usage_rows(probe)[0]["cost_usd"]
    keys = _team_keys(replicas[0], budget_usd=one * 2.5, budget_period="month")
    statuses = [httpx.post(replicas[i % 2].v1 + "/chat/completions", headers=auth(keys[i % 2]), json=BODY).status_code
                for i in range(3)]
    assert statuses == [200, 200, 200]
    for replica in replicas:
        for key in keys:
            refused = httpx.post(replica.v1 + "/chat/completions", headers=auth(key), json=BODY)
            assert refused.status_code == 402 and "team" in refused.json()["error"]["message"]

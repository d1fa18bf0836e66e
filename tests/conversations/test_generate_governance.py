"""Generate obeys the limits of the key its user key was minted from, that key's team included:
a spent team budget is 402, a team rpm is shared with the team's
other keys."""

from __future__ import annotations

import httpx

from tests.conversations.conftest import EndUser, mint_user
from tests.conversations.test_generate import generate
from tests.harness import Server, auth
from tests.limits.governance import make_team, new_org, set_key


def _user_in_team(gen_server: Server, **team: object) -> tuple[EndUser, str]:
    org = new_org()
    user = mint_user(gen_server, org)
    other = gen_server.create_key(org=org)
    team_id = make_team(gen_server, org, **team)
    for key in (user.owned_key, other):
        set_key(gen_server, key, team_id=team_id)
    return user, other


def test_generate_is_402_once_the_team_budget_is_spent(gen_server: Server) -> None:
    user, _ = _user_in_team(gen_server, budget_usd=0.0, budget_period="month")
    cid = user.create()["id"]
    question = user.say(cid, "hello")
    refused = generate(user, cid, question["id"], model="mock-chat")
    assert refused.status_code == 402, refused.text
    assert "team" in refused.json()["message"]


def test_generate_shares_the_team_rpm_with_its_other_keys(gen_server: Server) -> None:
    user, other = _user_in_team(gen_server, rpm=3)
    cid = user.create()["id"]  # every route of a key counts in its windows: one
    question = user.say(cid, "hello")  # two
    body = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(gen_server.v1 + "/chat/completions", headers=auth(other), json=body).status_code == 200
    refused = generate(user, cid, question["id"], model="mock-chat")
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) >= 1

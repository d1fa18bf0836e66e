"""Batch lines obey their key's team: its budget (lines fail `budget_exceeded` once it is spent,
whoever spent it) and its allow-list, as every metered route does."""

from __future__ import annotations

from tests.batches.conftest import content, create, request_line, wait_for
from tests.harness import Server, auth
from tests.limits.governance import make_team, new_org, set_key

import httpx


def test_lines_stop_once_the_team_budget_is_spent_by_another_key(batch_server: Server) -> None:
    org = new_org()
    spender, batcher = batch_server.create_key(org=org), batch_server.create_key(org=org)
    team = make_team(batch_server, org, budget_usd=1e-9, budget_period="day")
    for key in (spender, batcher):
        set_key(batch_server, key, team_id=team)
    # The team's other key spends the whole budget through the API.
    body = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(batch_server.v1 + "/chat/completions", headers=auth(spender), json=body).status_code == 200
    batch = create(batch_server, batcher, [request_line(f"b{i}") for i in range(3)])
    done = wait_for(batch_server, batcher, batch["id"], ("completed",), timeout=60)
    errors = content(batch_server, batcher, done["error_file_id"])
    assert len(errors) == 3 and {line["error"]["code"] for line in errors} == {"budget_exceeded"}
    assert all("team" in line["error"]["message"] for line in errors)


def test_lines_obey_the_team_allow_list(batch_server: Server) -> None:
    org = new_org()
    key = batch_server.create_key(org=org)
    set_key(batch_server, key, team_id=make_team(batch_server, org, models=["mock-chat"]))
    batch = create(batch_server, key, [request_line("yes"), request_line("no", model="mock-other")])
    done = wait_for(batch_server, key, batch["id"], ("completed",), timeout=60)
    assert [line["custom_id"] for line in content(batch_server, key, done["output_file_id"])] == ["yes"]
    errors = content(batch_server, key, done["error_file_id"])
    assert [line["error"]["code"] for line in errors] == ["model_not_allowed"]

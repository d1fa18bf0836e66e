"""/v1/admin/teams and the governance fields of /v1/admin/keys and /v1/admin/org:
teams made, changed and deleted over HTTP, keys put in them, what an admin may not
do to the operator's ceilings, and the next call obeying each change."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from tests.admin.conftest import AdminOrg, admin_call, chat, cli, error, ok
from tests.harness import Server, auth

TEAM_FIELDS = {"name", "budget_usd", "budget_period", "rpm", "tpm", "models", "spend_usd", "period_start",
               "resets_at"}


def today() -> date:
    """Today in UTC, as the server's periods count it."""
    return datetime.now(timezone.utc).date()


def team(server: Server, org: AdminOrg, name: str = "ops", **body: Any) -> dict[str, Any]:
    """POST a team; the 201 body."""
    return dict(ok(admin_call(server, org.admin, "POST", "/teams", {"name": name, **body}), 201))


def key(server: Server, org: AdminOrg, **body: Any) -> dict[str, Any]:
    """POST an application key; the 201 body."""
    return dict(ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application", **body}), 201))


def audit(server: Server, org: AdminOrg) -> list[dict[str, Any]]:
    """The org's audit entries, newest first."""
    return list(ok(admin_call(server, org.admin, "GET", "/audit", params={"limit": 100}))["data"])


def test_a_team_is_created_read_changed_and_deleted(server: Server, org: AdminOrg) -> None:
    created = team(server, org, budget_usd=5, budget_period="week", rpm=10, tpm=1000, models=["mock-chat", "fast"])
    monday = today() - timedelta(days=today().weekday())
    assert created == {"name": "ops", "budget_usd": 5.0, "budget_period": "week", "rpm": 10, "tpm": 1000,
                       "models": ["mock-chat", "fast"], "model_limits": None, "spend_usd": 0.0,
                       "period_start": monday.isoformat(),
                       "resets_at": (monday + timedelta(days=7)).isoformat()}
    bare = team(server, org, "bare")
    assert bare == {"name": "bare", "budget_usd": None, "budget_period": "month", "rpm": None, "tpm": None,
                    "models": None, "model_limits": None, "spend_usd": 0.0,
                    "period_start": today().replace(day=1).isoformat(),
                    "resets_at": bare["resets_at"]}
    listed = ok(admin_call(server, org.admin, "GET", "/teams"))
    assert listed == {"object": "list", "data": [bare, created]}  # by name
    assert ok(admin_call(server, org.admin, "GET", "/teams/ops")) == created

    changed = ok(admin_call(server, org.admin, "PATCH", "/teams/ops", {"budget_usd": None, "tpm": 5,
                                                                      "budget_period": "total", "models": None}))
    assert changed == {**created, "budget_usd": None, "tpm": 5, "budget_period": "total", "models": None,
                       "period_start": None, "resets_at": None}
    assert ok(admin_call(server, org.admin, "PATCH", "/teams/ops", {})) == changed
    assert ok(admin_call(server, org.admin, "DELETE", "/teams/ops")) == {"name": "ops", "deleted": True}
    error(admin_call(server, org.admin, "GET", "/teams/ops"), 404, "not_found_error", "team_not_found")
    assert [t["name"] for t in ok(admin_call(server, org.admin, "GET", "/teams"))["data"]] == ["bare"]

    entries = [(e["action"], e["target"], e["actor"]) for e in audit(server, org)]
    assert entries == [("team.delete", "ops", org.admin_id), ("team.update", "ops", org.admin_id),
                       ("team.create", "bare", org.admin_id), ("team.create", "ops", org.admin_id)]
    update_details = audit(server, org)[1]["details"]
    assert update_details == {"budget_usd": {"from": 5.0, "to": None}, "budget_period": {"from": "week", "to": "total"},
                              "tpm": {"from": 1000, "to": 5}, "models": {"from": ["mock-chat", "fast"], "to": None}}


def test_names_are_unique_per_org_and_other_orgs_teams_are_not_found(server: Server, org: AdminOrg) -> None:
    team(server, org, "ops", rpm=3)
    error(admin_call(server, org.admin, "POST", "/teams", {"name": "ops"}), 409, "invalid_request_error",
          "team_exists")
    other = AdminOrg("other", server.create_key(key_type="admin"))
    team(server, other, "ops")  # the same name in another org is another team
    for method, body in (("GET", None), ("PATCH", {"rpm": 1}), ("DELETE", None)):
        error(admin_call(server, other.admin, method, "/teams/nope", body), 404, "not_found_error", "team_not_found")
    ok(admin_call(server, other.admin, "DELETE", "/teams/ops"))
    assert ok(admin_call(server, org.admin, "GET", "/teams/ops"))["rpm"] == 3  # untouched


@pytest.mark.parametrize("body", [
    {}, {"name": ""}, {"name": "a/b"}, {"name": "ops", "rpm": 0}, {"name": "ops", "tpm": "5"},
    {"name": "ops", "budget_usd": -1}, {"name": "ops", "budget_period": "year"}, {"name": "ops", "models": "*"},
    {"name": "ops", "models": ["no-such-model"]}, {"name": "ops", "color": "red"},
])
def test_invalid_teams_are_refused_and_nothing_is_written(server: Server, org: AdminOrg, body: Any) -> None:
    error(admin_call(server, org.admin, "POST", "/teams", body), 400, "invalid_request_error")
    assert ok(admin_call(server, org.admin, "GET", "/teams"))["data"] == []
    assert audit(server, org) == []


def test_keys_join_teams_and_a_team_with_live_keys_is_not_deleted(server: Server, org: AdminOrg) -> None:
    team(server, org, "ops")
    member = key(server, org, team="ops", tpm=500, budget_period="day", models=["mock-chat"], expires_in="30d")
    assert (member["team"], member["tpm"], member["budget_period"], member["models"]) == \
        ("ops", 500, "day", ["mock-chat"])
    assert (member["period_start"], member["resets_at"]) == (today().isoformat(),
                                                            (today() + timedelta(days=1)).isoformat())
    expires = datetime.fromisoformat(member["expires_at"].replace("Z", "+00:00"))
    assert abs(expires - (datetime.now(timezone.utc) + timedelta(days=30))) < timedelta(minutes=1)
    assert chat(server, member["full_key"]).status_code == 200

    error(admin_call(server, org.admin, "DELETE", "/teams/ops"), 409, "invalid_request_error", "team_in_use")
    path = f"/keys/{member['access_key_id']}"
    moved = ok(admin_call(server, org.admin, "PATCH", path, {"team": None, "expires_at": None}))
    assert moved["team"] is None and moved["expires_at"] is None
    details = audit(server, org)[0]["details"]
    assert details["team"] == {"from": "ops", "to": None}
    ok(admin_call(server, org.admin, "PATCH", path, {"team": "ops"}))
    ok(admin_call(server, org.admin, "DELETE", path))  # a revoked key no longer holds its team
    assert ok(admin_call(server, org.admin, "DELETE", "/teams/ops"))["deleted"] is True
    assert ok(admin_call(server, org.admin, "GET", path))["team"] is None


def test_unknown_teams_wider_models_and_bad_durations_write_nothing(server: Server, org: AdminOrg) -> None:
    team(server, org, "narrow", models=["mock-plain", "mock-chat"])
    error(admin_call(server, org.admin, "POST", "/keys", {"type": "application", "team": "ghost"}), 404,
          "not_found_error", "team_not_found")
    refused = error(admin_call(server, org.admin, "POST", "/keys", {"type": "application", "team": "narrow",
                                                                     "models": ["mock-reason"]}),
                    400, "invalid_request_error", "model_not_allowed")
    assert "mock-reason" in refused["message"] and "narrow" in refused["message"]
    for body in ({"type": "application", "expires_in": "soon"}, {"type": "application", "expires_in": "10"},
                 {"type": "application", "expires_in": "1d", "expires_at": "2030-01-01T00:00:00Z"},
                 {"type": "application", "budget_period": "year"}, {"type": "application", "models": ["nope"]}):
        error(admin_call(server, org.admin, "POST", "/keys", body), 400, "invalid_request_error")
    assert [k["access_key_id"] for k in ok(admin_call(server, org.admin, "GET", "/keys"))["data"]] == [org.admin_id]

    # an alias of a model the team allows is within it
    free = key(server, org, models=["mock-reason"])
    within = key(server, org, team="narrow", models=["fast"])
    assert within["models"] == ["fast"] and chat(server, within["full_key"], "mock-chat").status_code == 200
    # a key whose own list is wider than the team's is not moved into it, and stays as it was
    path = f"/keys/{free['access_key_id']}"
    error(admin_call(server, org.admin, "PATCH", path, {"team": "narrow"}), 400, "invalid_request_error",
          "model_not_allowed")
    error(admin_call(server, org.admin, "PATCH", path, {"team": "ghost", "rpm": 3}), 404, "not_found_error",
          "team_not_found")
    error(admin_call(server, org.admin, "PATCH", path, {"expires_in": "-1d"}), 400, "invalid_request_error",
          "invalid_duration")
    unchanged = ok(admin_call(server, org.admin, "GET", path))
    assert (unchanged["team"], unchanged["rpm"], unchanged["expires_at"]) == (None, None, None)
    # dropping its own list first lets it in; the team's list then holds
    moved = ok(admin_call(server, org.admin, "PATCH", path, {"team": "narrow", "models": None}))
    assert (moved["team"], moved["models"]) == ("narrow", None)
    error(chat(server, free["full_key"], "mock-reason"), 403, "permission_error", "model_not_allowed")
    assert chat(server, free["full_key"], "mock-plain").status_code == 200


def test_a_teams_spent_budget_refuses_its_keys(server: Server, org: AdminOrg) -> None:
    probe = server.create_key()
    assert chat(server, probe).status_code == 200
    one = float(server.usage_rows(probe)[0]["cost_usd"])
    team(server, org, "tight", budget_usd=one * 1.5, budget_period="day")
    first, second = key(server, org, team="tight"), key(server, org, team="tight")
    outsider = key(server, org)
    assert chat(server, first["full_key"]).status_code == 200
    assert chat(server, second["full_key"]).status_code == 200  # 1x spent of 1.5x: admitted
    refused = error(chat(server, first["full_key"]), 402, "billing_error", "budget_exceeded")
    assert "team" in refused["message"]
    error(chat(server, second["full_key"]), 402, "billing_error", "budget_exceeded")
    assert chat(server, outsider["full_key"]).status_code == 200
    spent = ok(admin_call(server, org.admin, "GET", "/teams/tight"))["spend_usd"]
    assert spent == pytest.approx(2 * one)
    # raising the team's budget lets its keys call again from the next request
    ok(admin_call(server, org.admin, "PATCH", "/teams/tight", {"budget_usd": one * 10}))
    assert chat(server, first["full_key"]).status_code == 200
    # a team's rpm counts its keys together
    ok(admin_call(server, org.admin, "PATCH", "/teams/tight", {"budget_usd": None, "rpm": 1}))
    statuses = [chat(server, k["full_key"]).status_code for k in (first, second)]
    assert statuses in ([200, 429], [429, 429])  # the window may still hold the call just before


def test_an_admin_narrows_the_org_within_the_operators_list(server: Server, org: AdminOrg) -> None:
    cli(server, "orgs", "update", org.slug, "--models", "mock-chat,mock-plain")
    member = server.create_key(org=org.slug)
    refused = error(admin_call(server, org.admin, "PATCH", "/org", {"models": ["mock-chat", "mock-reason"]}), 403,
                    "permission_error", "operator_limit")
    assert "mock-reason" in refused["message"]
    error(admin_call(server, org.admin, "PATCH", "/org", {"models": ["mock-reason"]}), 403, "permission_error",
          "operator_limit")
    assert ok(admin_call(server, org.admin, "GET", "/org"))["models"] == ["mock-chat", "mock-plain"]
    # narrowing is the admin's: an alias is spelt as the operator's list spells its model
    assert ok(admin_call(server, org.admin, "PATCH", "/org", {"models": ["fast"]}))["models"] == ["mock-chat"]
    error(chat(server, member, "mock-plain"), 403, "permission_error", "model_not_allowed")
    assert chat(server, member, "mock-chat").status_code == 200
    # a team or key of the org gets no more than the org allows
    error(admin_call(server, org.admin, "POST", "/teams", {"name": "wide", "models": ["mock-plain"]}), 400,
          "invalid_request_error", "model_not_allowed")
    # "*" lifts the admin's narrowing, back to the operator's list, never past it
    assert ok(admin_call(server, org.admin, "PATCH", "/org", {"models": "*"}))["models"] == ["mock-chat", "mock-plain"]
    assert chat(server, member, "mock-plain").status_code == 200
    error(chat(server, member, "mock-reason"), 403, "permission_error", "model_not_allowed")
    assert audit(server, org)[0]["details"] == {"models": {"from": ["mock-chat"], "to": ["mock-chat", "mock-plain"]}}


@pytest.mark.parametrize("body", [{"budget_usd": 100}, {"budget_usd": None}, {"budget_period": "day"},
                                  {"budget_usd": 1, "web_search": True}])
def test_an_admin_may_not_set_or_lift_the_orgs_budget(server: Server, org: AdminOrg, body: dict[str, Any]) -> None:
    cli(server, "orgs", "update", org.slug, "--budget-usd", "0")
    member = server.create_key(org=org.slug)
    error(chat(server, member), 402, "billing_error", "budget_exceeded")
    error(admin_call(server, org.admin, "PATCH", "/org", body), 403, "permission_error", "operator_limit")
    error(chat(server, member), 402, "billing_error", "budget_exceeded")
    assert ok(admin_call(server, org.admin, "GET", "/org"))["web_search"] is False
    cli(server, "orgs", "update", org.slug, "--no-budget")
    assert chat(server, member).status_code == 200


def test_a_key_past_its_expiry_is_refused(server: Server, org: AdminOrg) -> None:
    soon = key(server, org, expires_in="2s")
    assert chat(server, soon["full_key"]).status_code == 200
    past = ok(admin_call(server, org.admin, "PATCH", f"/keys/{soon['access_key_id']}",
                         {"expires_at": "2020-01-01T00:00:00+02:00"}))
    assert past["expires_at"] == "2019-12-31T22:00:00Z"
    error(chat(server, soon["full_key"]), 401, "authentication_error")
    ok(admin_call(server, org.admin, "PATCH", f"/keys/{soon['access_key_id']}", {"expires_at": None}))
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(soon["full_key"]),
                      json={"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}).status_code == 200


@pytest.mark.parametrize("name", ["%00", "x" * 600, "%C3%A9t%C3%A9", "..", "a%2Fb"])
def test_odd_team_names_in_paths_are_refused_not_failed(server: Server, org: AdminOrg, name: str) -> None:
    for method, body in (("GET", None), ("PATCH", {"rpm": 1}), ("DELETE", None)):
        response = admin_call(server, org.admin, method, f"/teams/{name}", body)
        assert response.status_code in (400, 404), response.text
    for body in ({"type": "application", "team": "\u0000"}, {"type": "application", "models": ["\u0000"]}):
        error(admin_call(server, org.admin, "POST", "/keys", body), 400, "invalid_request_error")

"""The governance commands: `inferd teams …`, and the team, tpm, period,
models and expiry flags of `keys create|update` and the budget flags of `orgs create|update`,
run as the operator runs them against a live server's database."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

from tests.admin.conftest import AdminOrg, admin_call, chat, error, ok
from tests.cli.test_cli import inferd
from tests.harness import Server


def run(server: Server, *args: str) -> str:
    """`inferd ARGS`, which must succeed; its output."""
    result = inferd(server, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def refused(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    """`inferd ARGS`, which must fail with a message."""
    result = inferd(server, *args)
    assert result.returncode != 0 and result.stderr.strip(), (result.stdout, result.stderr)
    return result


def new_org(server: Server) -> AdminOrg:
    """A fresh org made by the command line, with an admin key made by the harness (no audit entry)."""
    slug = f"cli-{uuid.uuid4().hex[:8]}"
    run(server, "orgs", "create", slug, "--models", "mock-chat,mock-plain")
    return AdminOrg(slug, server.create_key(org=slug, key_type="admin"))


def new_key(server: Server, org: AdminOrg, *flags: str) -> dict[str, Any]:
    """`keys create` in the org; its JSON."""
    return dict(json.loads(run(server, "keys", "create", "--org", org.slug, "--type", "application", "--json",
                               *flags)))


def listed(server: Server, org: AdminOrg) -> list[dict[str, Any]]:
    """`teams list ORG --json`."""
    return [json.loads(line) for line in run(server, "teams", "list", org.slug, "--json").splitlines()]


def test_teams_are_created_listed_changed_and_deleted(server: Server) -> None:
    org = new_org(server)
    run(server, "teams", "create", f"{org.slug}/ops", "--budget-usd", "5", "--budget-period", "week", "--rpm", "10",
        "--tpm", "1000", "--models", "mock-chat")
    run(server, "teams", "create", f"{org.slug}/research")
    teams = listed(server, org)
    assert [(t["name"], t["budget_usd"], t["budget_period"], t["rpm"], t["tpm"], t["models"]) for t in teams] == [
        ("ops", 5.0, "week", 10, 1000, ["mock-chat"]), ("research", None, "month", None, None, None)]
    assert ok(admin_call(server, org.admin, "GET", "/teams/ops")) == teams[0]  # the admin API sees the same
    assert "ops: budget 5.0 per week" in run(server, "teams", "list", org.slug)

    run(server, "teams", "update", f"{org.slug}/ops", "--no-budget", "--no-rpm", "--tpm", "7", "--no-models",
        "--budget-period", "total")
    assert listed(server, org)[0] == {**teams[0], "budget_usd": None, "rpm": None, "tpm": 7, "models": None,
                                      "budget_period": "total", "period_start": None, "resets_at": None}
    run(server, "teams", "delete", f"{org.slug}/research")
    assert [t["name"] for t in listed(server, org)] == ["ops"]
    page = ok(admin_call(server, org.admin, "GET", "/audit"))["data"]
    assert [(e["action"], e["target"], e["actor"]) for e in page] == [
        ("team.delete", "research", "cli"), ("team.update", "ops", "cli"), ("team.create", "research", "cli"),
        ("team.create", "ops", "cli"), ("org.create", org.slug, "cli")]
    assert page[3]["details"] == {"budget_usd": 5.0, "budget_period": "week", "rpm": 10, "tpm": 1000,
                                  "models": ["mock-chat"]}


def test_bad_team_commands_fail_and_write_nothing(server: Server) -> None:
    org = new_org(server)
    refused(server, "teams", "create", f"nope-{uuid.uuid4().hex[:6]}/ops")
    refused(server, "teams", "create", "no-slash")
    refused(server, "teams", "create", f"{org.slug}/a/b")
    wider = refused(server, "teams", "create", f"{org.slug}/ops", "--models", "mock-reason")
    assert "mock-reason" in wider.stderr
    refused(server, "teams", "create", f"{org.slug}/ops", "--models", "no-such-model")
    refused(server, "teams", "create", f"{org.slug}/ops", "--budget-period", "year")
    refused(server, "teams", "update", f"{org.slug}/ghost", "--rpm", "3")
    refused(server, "teams", "delete", f"{org.slug}/ghost")
    refused(server, "teams", "list", f"nope-{uuid.uuid4().hex[:6]}")
    assert listed(server, org) == []
    run(server, "teams", "create", f"{org.slug}/ops")
    refused(server, "teams", "create", f"{org.slug}/ops")  # exists
    refused(server, "teams", "update", f"{org.slug}/ops")  # nothing to change
    refused(server, "teams", "update", f"{org.slug}/ops", "--rpm", "3", "--no-rpm")
    assert [e["action"] for e in ok(admin_call(server, org.admin, "GET", "/audit"))["data"]] == [
        "team.create", "org.create"]


def test_keys_take_a_team_models_limits_and_an_expiry(server: Server) -> None:
    org = new_org(server)
    run(server, "teams", "create", f"{org.slug}/ops", "--models", "mock-chat")
    created = new_key(server, org, "--team", "ops", "--tpm", "900", "--budget-period", "day", "--models", "fast",
                      "--expires-in", "12h")
    shown = ok(admin_call(server, org.admin, "GET", f"/keys/{created['access_key_id']}"))
    assert (shown["team"], shown["tpm"], shown["budget_period"], shown["models"]) == ("ops", 900, "day", ["fast"])
    assert shown["expires_at"] is not None
    assert chat(server, created["full_key"]).status_code == 200

    # a team that keys belong to is not deleted
    assert "live key" in refused(server, "teams", "delete", f"{org.slug}/ops").stderr
    key_id = created["access_key_id"]
    run(server, "keys", "update", key_id, "--no-team", "--no-tpm", "--budget-period", "week", "--no-expiry",
        "--models", "mock-plain")
    shown = ok(admin_call(server, org.admin, "GET", f"/keys/{key_id}"))
    assert (shown["team"], shown["tpm"], shown["budget_period"], shown["models"], shown["expires_at"]) == \
        (None, None, "week", ["mock-plain"], None)
    # the server obeys a change made by another process from the next request
    error(chat(server, created["full_key"], "mock-chat"), 403, "permission_error", "model_not_allowed")
    run(server, "teams", "delete", f"{org.slug}/ops")
    details = ok(admin_call(server, org.admin, "GET", "/audit"))["data"][1]["details"]
    assert details["team"] == {"from": "ops", "to": None} and details["models"] == {"from": ["fast"],
                                                                                    "to": ["mock-plain"]}


def test_bad_key_flags_fail_and_write_nothing(server: Server) -> None:
    org = new_org(server)
    run(server, "teams", "create", f"{org.slug}/ops", "--models", "mock-plain")
    absent = f"cli-{uuid.uuid4().hex[:8]}"
    assert "ghost" in refused(server, "keys", "create", "--org", absent, "--type", "application",
                              "--team", "ghost").stderr
    refused(server, "orgs", "update", absent, "--web-search")  # the org was not created either
    refused(server, "keys", "create", "--org", org.slug, "--type", "application", "--team", "ghost")
    refused(server, "keys", "create", "--org", org.slug, "--type", "application", "--team", "ops",
            "--models", "mock-chat")
    refused(server, "keys", "create", "--org", org.slug, "--type", "application", "--models", "mock-reason")
    assert "duration" in refused(server, "keys", "create", "--org", org.slug, "--type", "application",
                                 "--expires-in", "a while").stderr
    refused(server, "keys", "create", "--org", org.slug, "--type", "application", "--budget-period", "year")
    assert [k["access_key_id"] for k in ok(admin_call(server, org.admin, "GET", "/keys"))["data"]] == [org.admin_id]

    key_id = new_key(server, org, "--models", "mock-chat")["access_key_id"]
    refused(server, "keys", "update", key_id, "--team", "ops")  # its models reach past the team's
    refused(server, "keys", "update", key_id, "--team", "ghost", "--rpm", "3")
    refused(server, "keys", "update", key_id, "--expires-in", "10")
    refused(server, "keys", "update", key_id, "--tpm", "5", "--no-tpm")
    shown = ok(admin_call(server, org.admin, "GET", f"/keys/{key_id}"))
    assert (shown["team"], shown["rpm"], shown["tpm"], shown["expires_at"]) == (None, None, None, None)


def test_the_operator_sets_the_orgs_budget(server: Server) -> None:
    slug = f"cli-{uuid.uuid4().hex[:8]}"
    run(server, "orgs", "create", slug, "--budget-usd", "0", "--budget-period", "day")
    member = new_key(server, AdminOrg(slug, ""))["full_key"]
    refusal = error(chat(server, member), 402, "billing_error", "budget_exceeded")
    assert "org" in refusal["message"]
    run(server, "orgs", "update", slug, "--no-budget")
    assert chat(server, member).status_code == 200
    run(server, "orgs", "update", slug, "--budget-usd", "0")
    error(chat(server, member), 402, "billing_error", "budget_exceeded")
    refused(server, "orgs", "update", slug, "--budget-usd", "1", "--no-budget")
    refused(server, "orgs", "update", slug, "--budget-period", "fortnight")


def test_a_team_budget_set_by_the_cli_holds_on_the_next_request(server: Server) -> None:
    org = new_org(server)
    run(server, "teams", "create", f"{org.slug}/ops")
    member = new_key(server, org, "--team", "ops")["full_key"]
    assert chat(server, member).status_code == 200
    run(server, "teams", "update", f"{org.slug}/ops", "--budget-usd", "0")
    error(chat(server, member), 402, "billing_error", "budget_exceeded")
    run(server, "teams", "update", f"{org.slug}/ops", "--no-budget")
    assert chat(server, member).status_code == 200

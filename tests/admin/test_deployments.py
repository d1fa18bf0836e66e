"""/v1/admin/deployments: every configured deployment's health as the server sees it."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone

from tests.admin.conftest import AdminOrg, admin_call, chat, ok
from tests.harness import Server

FIELDS = {"model", "deployment", "up", "in_flight", "failures", "failures_by_reason", "cooldown_until"}


def deployments(server: Server, org: AdminOrg) -> dict[str, dict[str, object]]:
    """The list, by deployment name (one per model in the test catalogue)."""
    listing = ok(admin_call(server, org.admin, "GET", "/deployments"))
    assert listing["object"] == "list"
    return {d["deployment"]: d for d in listing["data"]}


def test_lists_the_configured_deployments(server: Server, org: AdminOrg) -> None:
    assert chat(server, org.admin, "mock-chat").status_code == 200
    by_name = deployments(server, org)
    assert {"mock-chat", "mock-plain", "mock-embed", "mock-dead", "mock-maint"} <= set(by_name)
    healthy = by_name["mock-chat"]
    assert set(healthy) == FIELDS and healthy["model"] == "mock-chat"
    assert healthy["up"] is True and healthy["cooldown_until"] is None and healthy["in_flight"] == 0
    assert isinstance(healthy["failures"], int) and set(healthy["failures_by_reason"]) == {  # type: ignore[arg-type]
        "connect", "timeout", "status_5xx", "status_429"}


def test_a_failing_deployment_shows_down_with_its_failures(server: Server, org: AdminOrg) -> None:
    before = deployments(server, org)["mock-dead"]
    failed = chat(server, org.admin, "mock-dead")
    assert failed.status_code >= 500
    after = deployments(server, org)["mock-dead"]
    assert after["up"] is False and after["in_flight"] == 0
    assert after["failures"] == before["failures"] + 1  # type: ignore[operator]
    assert after["failures_by_reason"]["connect"] == before["failures_by_reason"]["connect"] + 1  # type: ignore[index]
    until = str(after["cooldown_until"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", until)
    ends = datetime.fromisoformat(until.replace("Z", "+00:00"))
    assert 0 < (ends - datetime.now(timezone.utc)).total_seconds() <= 61


def test_only_the_models_the_org_may_use_are_listed(server: Server, org: AdminOrg) -> None:
    """The org's allow-list bounds the listing as it bounds calls, by id or alias."""
    everything = {d["model"] for d in ok(admin_call(server, org.admin, "GET", "/deployments"))["data"]}
    assert {"mock-chat", "mock-plain", "mock-embed", "mock-dead", "mock-maint"} <= everything  # "*": all

    ok(admin_call(server, org.admin, "PATCH", "/org", {"models": ["mock-chat"]}))
    listed = ok(admin_call(server, org.admin, "GET", "/deployments"))["data"]
    assert listed and {d["model"] for d in listed} == {"mock-chat"}
    ok(admin_call(server, org.admin, "PATCH", "/org", {"models": ["embed-alias", "mock-dead"]}))
    assert {d["model"] for d in ok(admin_call(server, org.admin, "GET", "/deployments"))["data"]} == {
        "mock-embed", "mock-dead"}
    ok(admin_call(server, org.admin, "PATCH", "/org", {"models": "*"}))
    assert {d["model"] for d in ok(admin_call(server, org.admin, "GET", "/deployments"))["data"]} == everything
    # another org's allow-list is its own
    narrow = f"adm-{uuid.uuid4().hex[:8]}"
    server.create_org(narrow, ("fast",))
    other = AdminOrg(narrow, server.create_key(org=narrow, key_type="admin"))
    assert {d["model"] for d in ok(admin_call(server, other.admin, "GET", "/deployments"))["data"]} == {"mock-chat"}

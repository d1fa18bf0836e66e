"""Per-model windows: a key's or team's own rpm and tpm on one model (id
or alias, counted on the canonical id), set through the admin API and the command line, and a
model's `[[models]] rpm`/`tpm` over every caller."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.admin.conftest import AdminOrg, admin_call, chat, cli, error, ok
from tests.harness import Backend, Server, Upstream, auth, serving


def test_a_key_window_on_one_model_counts_that_model_only(server: Server, org: AdminOrg) -> None:
    key = ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application"}), 201)
    changed = ok(admin_call(server, org.admin, "PATCH", f"/keys/{key['access_key_id']}",
                            {"model_limits": {"fast": {"rpm": 1}}}))
    assert changed["model_limits"] == {"mock-chat": {"rpm": 1}}  # an alias is stored as its model's id
    admitted = chat(server, key["full_key"], "mock-chat")
    assert admitted.status_code == 200
    assert admitted.headers["x-ratelimit-limit-requests"] == "1"
    refused = chat(server, key["full_key"], "chat-alias")  # the same model by another name
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert chat(server, key["full_key"], "mock-plain").status_code == 200  # another model: its own business
    me = httpx.get(server.v1 + "/me", headers=auth(key["full_key"])).json()
    assert {(w["scope"], w["model"], w["rpm"], w["remaining_requests"]) for w in me["limits"]} == {
        ("key", "mock-chat", 1, 0)}


def test_bad_model_limits_are_400_and_change_nothing(server: Server, org: AdminOrg) -> None:
    key = ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application"}), 201)
    path = f"/keys/{key['access_key_id']}"
    for body in ({"model_limits": {"no-such-model": {"rpm": 1}}}, {"model_limits": {"mock-chat": {"rpm": 0}}},
                 {"model_limits": {"mock-chat": {"rps": 1}}}, {"model_limits": {"mock-chat": {}}}):
        response = admin_call(server, org.admin, "PATCH", path, body)
        assert response.status_code == 400, (body, response.text)
    assert ok(admin_call(server, org.admin, "GET", path))["model_limits"] is None


def test_a_team_window_on_one_model_is_shared_by_its_keys(server: Server, org: AdminOrg) -> None:
    ok(admin_call(server, org.admin, "POST", "/teams",
                  {"name": "modellers", "model_limits": {"mock-chat": {"rpm": 2}}}), 201)
    keys = [ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application", "team": "modellers"}),
               201)["full_key"] for _ in range(2)]
    assert [chat(server, k).status_code for k in (keys[0], keys[1], keys[0])] == [200, 200, 429]
    assert chat(server, keys[1], "mock-plain").status_code == 200


def test_the_command_line_sets_and_clears_model_limits(server: Server, org: AdminOrg) -> None:
    key = ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application"}), 201)
    key_id = key["access_key_id"]
    cli(server, "keys", "update", key_id, "--model-limit", "fast:rpm=5,tpm=1000", "--model-limit", "mock-plain:rpm=2")
    shown = ok(admin_call(server, org.admin, "GET", f"/keys/{key_id}"))["model_limits"]
    assert shown == {"mock-chat": {"rpm": 5, "tpm": 1000}, "mock-plain": {"rpm": 2}}
    cli(server, "keys", "update", key_id, "--no-model-limit", "chat-alias")
    assert ok(admin_call(server, org.admin, "GET", f"/keys/{key_id}"))["model_limits"] == {"mock-plain": {"rpm": 2}}
    cli(server, "teams", "create", f"{org.slug}/clit")
    cli(server, "teams", "update", f"{org.slug}/clit", "--model-limit", "mock-chat:tpm=50")
    team = ok(admin_call(server, org.admin, "GET", "/teams/clit"))
    assert team["model_limits"] == {"mock-chat": {"tpm": 50}}
    audit = ok(admin_call(server, org.admin, "GET", "/audit"))["data"]
    assert any(entry["action"] == "key.update" and "model_limits" in entry["details"] for entry in audit)


CAPPED_TOML = """
[[models]]
id = "capped"
base_url = "{upstream}/v1"
upstream_model = "mock"
tokenizer = "upstream"
rpm = 3
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "token-capped"
base_url = "{upstream}/v1"
upstream_model = "mock"
tokenizer = "upstream"
tpm = 1
"""


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("capped"), backend, upstream, CAPPED_TOML) as srv:
        yield srv


def test_a_model_rpm_counts_every_caller(capped: Server) -> None:
    keys = [capped.create_key() for _ in range(2)]  # two orgs
    statuses = [chat(capped, keys[i % 2], "capped").status_code for i in range(5)]
    assert statuses == [200, 200, 200, 429, 429]


def test_a_model_tpm_counts_every_callers_tokens(capped: Server) -> None:
    first, second = capped.create_key(), capped.create_key()
    assert chat(capped, first, "token-capped").status_code == 200
    refused = chat(capped, second, "token-capped")
    assert refused.status_code == 429 and refused.headers["x-ratelimit-remaining-tokens"] == "0"
    assert error(refused, 429, "rate_limit_error")["code"] == "rate_limit_exceeded"


def test_a_model_rpm_must_be_positive(tmp_path: Path, backend: Backend, upstream: Upstream) -> None:
    from tests.harness import write_config
    config = write_config(tmp_path / "bad.toml", CAPPED_TOML.replace("rpm = 3", "rpm = 0"), upstream)
    with pytest.raises(RuntimeError, match="rpm"):
        Server.start(tmp_path, backend, config)


def test_limits_past_32_bits_are_400_not_500(server: Server, org: AdminOrg) -> None:
    """Limits are stored as 32-bit integers: PostgreSQL refused a larger one with a 500."""
    key = ok(admin_call(server, org.admin, "POST", "/keys", {"type": "application"}), 201)
    path = f"/keys/{key['access_key_id']}"
    for body in ({"tpm": 2**31}, {"rpm": 2**40}, {"model_limits": {"mock-chat": {"tpm": 2**31}}}):
        assert admin_call(server, org.admin, "PATCH", path, body).status_code == 400, body
    assert admin_call(server, org.admin, "POST", "/teams", {"name": "huge", "tpm": 2**31}).status_code == 400
    assert ok(admin_call(server, org.admin, "PATCH", path, {"tpm": 2**31 - 1}))["tpm"] == 2**31 - 1

"""The command line: serve's first key, orgs create, keys create/revoke."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from inferd.store.tables import users
from tests.harness import INFERD, Backend, Server, auth, clean_env, pg_create_database, pg_drop_database

BODY = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


def inferd(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env({**server.backend.env(), "INFERD_CONFIG": str(server.config),
                     "INFERD_DATA_DIR": str(server.data_dir)})
    return subprocess.run([INFERD, *args], capture_output=True, text=True, env=env, timeout=60)


def test_keys_create_prints_the_full_key_last(server: Server) -> None:
    result = inferd(server, "keys", "create", "--org", f"cli-{uuid.uuid4().hex[:6]}", "--type", "application",
                    "--name", "ci", "--rpm", "100", "--budget-usd", "5")
    assert result.returncode == 0, result.stderr
    full_key = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"IFDK[A-Z0-9]{28}:[0-9a-f]{64}", full_key)
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(full_key), json=BODY).status_code == 200
    row = server.key_row(full_key)
    assert row["rpm"] == 100 and row["budget_usd"] == 5 and row["type"] == "application" and row["name"] == "ci"


def test_keys_create_json_and_revoke(server: Server) -> None:
    org = f"cli-{uuid.uuid4().hex[:6]}"
    result = inferd(server, "keys", "create", "--org", org, "--type", "admin", "--json")
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert set(created) == {"access_key_id", "secret", "full_key", "org", "type"}
    assert created["full_key"] == f"{created['access_key_id']}:{created['secret']}"
    assert created["org"] == org and created["type"] == "admin"
    key = created["full_key"]
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code == 200
    revoked = inferd(server, "keys", "revoke", created["access_key_id"])
    assert revoked.returncode == 0, revoked.stderr
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY)
    assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"
    assert inferd(server, "keys", "revoke", created["access_key_id"]).returncode != 0


def test_keys_create_with_user_owner(server: Server) -> None:
    org = f"cli-{uuid.uuid4().hex[:6]}"

    def create(org: str, *owner: str, key_type: str = "application") -> dict[str, str]:
        result = inferd(server, "keys", "create", "--org", org, "--type", key_type, *owner, "--json")
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    key = create(org, "--user", "bob@example.com")
    assert key["org"] == org and key["type"] == "application"
    row = server.key_row(key["full_key"])
    user = _user(server, row["user_id"])
    # The owner is the org's user with that email (made by the command), not linked to an idp subject.
    assert user["email"] == "bob@example.com" and user["org_id"] == row["org_id"] and user["subject"] is None
    admin = create(org, key_type="admin")["full_key"]
    shown = httpx.get(f"{server.v1}/admin/keys/{key['access_key_id']}", headers=auth(admin))
    assert shown.status_code == 200 and shown.json()["user_email"] == "bob@example.com"
    # A second key for the same email in the same org belongs to the same user; in another org, to
    # that org's own user; a key made without --user has no owner.
    assert server.key_row(create(org, "--user", "bob@example.com")["full_key"])["user_id"] == row["user_id"]
    elsewhere = server.key_row(create(f"{org}-b", "--user", "bob@example.com")["full_key"])
    assert elsewhere["user_id"] != row["user_id"]
    assert _user(server, elsewhere["user_id"])["email"] == "bob@example.com"
    assert server.key_row(create(org)["full_key"])["user_id"] is None
    # The call is charged to the user.
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(key["full_key"]), json=BODY).status_code == 200
    assert [r["user_id"] for r in server.usage_rows(key["full_key"])] == [str(row["user_id"])]


def _user(server: Server, user_id: int) -> dict[str, Any]:
    """The stored row of a user."""

    async def work(engine: Any) -> dict[str, Any]:
        async with engine.connect() as conn:
            return dict((await conn.execute(select(users).where(users.c.id == user_id))).mappings().one())

    return dict(asyncio.run(server._with_db(work)))


def test_orgs_create_with_allow_list_and_flags(server: Server) -> None:
    org = f"cli-{uuid.uuid4().hex[:6]}"
    created = inferd(server, "orgs", "create", org, "--models", "mock-plain,fast", "--no-file-attachments",
                     "--web-search")
    assert created.returncode == 0, created.stderr
    assert inferd(server, "orgs", "create", org).returncode != 0  # already exists
    key = json.loads(inferd(server, "keys", "create", "--org", org, "--type", "application", "--json").stdout)
    listed = httpx.get(server.v1 + "/models", headers=auth(key["full_key"])).json()
    assert {m["id"] for m in listed["data"]} == {"mock-plain", "mock-chat"}


def test_serve_bootstraps_a_default_org_and_prints_one_key(tmp_path: Path, backend: Backend,
                                                           config_file: Path) -> None:
    fresh_name = None
    if backend.database_url.startswith("sqlite"):
        fresh = Backend(f"sqlite:///{tmp_path / 'fresh.db'}", None, backend.redis_prefix)
    else:  # a database of its own: the run's shared one already has orgs
        fresh_name = f"inferd_fresh_{uuid.uuid4().hex[:8]}"
        fresh = Backend(pg_create_database(backend.database_url, fresh_name), backend.redis_url,
                        backend.redis_prefix)
    try:
        _check_bootstrap(tmp_path, fresh, config_file)
    finally:
        if fresh_name:
            pg_drop_database(backend.database_url, fresh_name)


def _check_bootstrap(tmp_path: Path, fresh: Backend, config_file: Path) -> None:
    first = Server.start(tmp_path, fresh, config_file)
    try:
        lines = first.log().splitlines()
        keys = [line for line in lines if re.fullmatch(r"IFDK[A-Z0-9]{28}:[0-9a-f]{64}", line)]
        assert len(keys) == 1
        assert httpx.post(first.v1 + "/chat/completions", headers=auth(keys[0]), json=BODY).status_code == 200
    finally:
        first.stop()
    second = Server.start(tmp_path, fresh, config_file)
    try:
        assert not re.search(r"IFDK[A-Z0-9]{28}:", second.log())  # only the first start prints a key
    finally:
        second.stop()


def test_serve_help_names_the_limits_an_operator_sets() -> None:
    """`inferd serve --help` lists the body caps and the settings that bound one request."""
    result = subprocess.run([INFERD, "serve", "--help"], capture_output=True, text=True, env=clean_env({}))
    assert result.returncode == 0
    for needle in ("32 MiB", "64 KiB", "1 MiB", "75 MiB", "body_timeout_s", "max_duration_s", "extract_timeout_s", "2048", "--rpm"):
        assert needle in result.stdout, needle


def test_a_key_update_from_another_process_holds_on_the_next_request(server: Server) -> None:
    # The server keeps found keys (on SQLite while no other connection has committed, on
    # PostgreSQL until a NOTIFY): a change made by the CLI must still count on the next request.
    key = server.create_key()
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code == 200
    updated = inferd(server, "keys", "update", key.split(":")[0], "--rpm", "1")
    assert updated.returncode == 0, updated.stderr
    statuses = [httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=BODY).status_code
                for _ in range(2)]
    assert statuses == [200, 429]

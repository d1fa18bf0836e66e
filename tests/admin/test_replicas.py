"""Two replicas on one database and one Redis: a change made on one is obeyed by the very next
request on the other, although replicas cache keys on PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.admin.conftest import admin_call, chat, error, ok
from tests.harness import Backend, Server

LOCAL_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, backend: Backend, config_file: Path) -> Iterator[list[Server]]:
    """Two replicas sharing the run's database, a Redis (the local one when the run has none) and
    the data dir (replicas share it)."""
    shared = Backend(backend.database_url, backend.redis_url or LOCAL_REDIS, backend.redis_prefix + "admin:")
    data_dir = tmp_path_factory.mktemp("admin-replicas")
    servers: list[Server] = []
    try:
        for _ in range(2):
            servers.append(Server.start(data_dir, shared, config_file))
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_a_change_on_one_replica_holds_on_the_other_at_once(replicas: list[Server]) -> None:
    a, b = replicas
    admin = a.create_key(key_type="admin")
    created = ok(admin_call(a, admin, "POST", "/keys", {"type": "application"}), 201)
    key, path = created["full_key"], f"/keys/{created['access_key_id']}"
    for _ in range(3):  # B now holds the key record (cached on PostgreSQL)
        assert chat(b, key).status_code == 200

    ok(admin_call(a, admin, "PATCH", path, {"budget_usd": 0}))
    error(chat(b, key), 402, "billing_error", "budget_exceeded")
    ok(admin_call(a, admin, "PATCH", path, {"budget_usd": None}))
    assert chat(b, key).status_code == 200

    ok(admin_call(a, admin, "PATCH", path, {"rpm": 1}))
    assert chat(b, key).status_code == 200
    refused = chat(b, key)
    error(refused, 429, "rate_limit_error")
    assert int(refused.headers["Retry-After"]) >= 1
    error(chat(a, key), 429, "rate_limit_error")  # one window for both replicas
    ok(admin_call(a, admin, "PATCH", path, {"rpm": None}))
    assert chat(b, key).status_code == 200

    ok(admin_call(a, admin, "PATCH", "/org", {"models": ["mock-plain"]}))
    error(chat(b, key, "mock-chat"), 403, "permission_error", "model_not_allowed")
    assert chat(b, key, "mock-plain").status_code == 200

    ok(admin_call(a, admin, "DELETE", path))
    error(chat(b, key, "mock-plain"), 401, "authentication_error", "key_revoked")


def test_repeated_changes_hold_on_the_other_replica_every_time(replicas: list[Server]) -> None:
    """The NOTIFY races the next request; many rounds make a lost race show."""
    a, b = replicas
    admin = a.create_key(key_type="admin")
    created = ok(admin_call(a, admin, "POST", "/keys", {"type": "application"}), 201)
    key, path = created["full_key"], f"/keys/{created['access_key_id']}"
    for _ in range(10):
        assert chat(b, key).status_code == 200
        ok(admin_call(a, admin, "PATCH", path, {"budget_usd": 0}))
        assert chat(b, key).status_code == 402
        ok(admin_call(a, admin, "PATCH", path, {"budget_usd": None}))

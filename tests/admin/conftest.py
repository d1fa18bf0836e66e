"""Helpers of the admin API tests: an org with an admin key, calls on the
admin routes, and the command line run against the test server's database."""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.harness import INFERD, Server, auth, clean_env

CHAT = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}


@dataclass(frozen=True)
class AdminOrg:
    """A fresh org and the full key of its admin (made by the harness, which writes no audit entry)."""

    slug: str
    admin: str

    @property
    def admin_id(self) -> str:
        """The admin key's access key id."""
        return self.admin.split(":")[0]


@pytest.fixture()
def org(server: Server) -> AdminOrg:
    """A fresh org with one admin key."""
    slug = f"adm-{uuid.uuid4().hex[:8]}"
    return AdminOrg(slug, server.create_key(org=slug, key_type="admin"))


def admin_call(server: Server, key: str, method: str, path: str, json: Any = None,
               params: dict[str, Any] | None = None) -> httpx.Response:
    """`method` on `/v1/admin{path}` with `key`."""
    return httpx.request(method, server.v1 + "/admin" + path, headers=auth(key), json=json, params=params,
                         timeout=30)


def ok(response: httpx.Response, status: int = 200) -> Any:
    """The JSON body of a successful answer."""
    assert response.status_code == status, response.text
    return response.json()


def error(response: httpx.Response, status: int, type_: str, code: str | None = None) -> dict[str, Any]:
    """The error object of an answer in the standard envelope, checked."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["type"] == type_ and body["error"]["message"], body
    if code is not None:
        assert body["error"]["code"] == code, body
    return dict(body["error"])


def chat(server: Server, key: str, model: str = "mock-chat") -> httpx.Response:
    """One chat call."""
    return httpx.post(server.v1 + "/chat/completions", headers=auth(key), json={**CHAT, "model": model}, timeout=30)


def cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    """`inferd ARGS` with the server's environment (its database and configuration)."""
    env = clean_env({**server.backend.env(), "INFERD_CONFIG": str(server.config),
                     "INFERD_DATA_DIR": str(server.data_dir)})
    result = subprocess.run([INFERD, *args], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return result

"""inferd_client's admin methods against the running server (sync and async)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from inferd_client import (AdminKey, AdminKeyList, AsyncClient, AuditPage, Client, ClientValidationError,
                           CreatedKey, DeploymentList, OrgSettings, PermissionDeniedError)
from tests.admin.conftest import chat
from tests.harness import Server


def test_sync_client_administers_the_org(server: Server) -> None:
    slug = f"adm-{uuid.uuid4().hex[:8]}"
    admin = server.create_key(org=slug, key_type="admin")
    with Client(server.base_url, admin, timeout=30) as client:
        created = client.create_key("application", name="svc", budget_usd=1.5, rpm=60)
        assert isinstance(created, CreatedKey) and created.full_key == f"{created.access_key_id}:{created.secret}"
        assert (created.name, created.budget_usd, created.rpm, created.type) == ("svc", 1.5, 60, "application")
        assert chat(server, created.full_key).status_code == 200
        listing = client.list_keys()
        assert isinstance(listing, AdminKeyList)
        assert {k.access_key_id for k in listing.data} == {admin.split(":")[0], created.access_key_id}
        changed = client.update_key(created.access_key_id, budget_usd=None, name="svc-2")
        assert isinstance(changed, AdminKey) and changed.budget_usd is None and changed.rpm == 60
        assert changed.name == "svc-2"
        assert client.get_key(created.access_key_id).to_dict() == changed.to_dict()
        revoked = client.revoke_key(created.access_key_id)
        assert revoked.revoked_at is not None and chat(server, created.full_key).status_code == 401

        org = client.get_org()
        assert isinstance(org, OrgSettings) and (org.slug, org.models) == (slug, "*")
        assert client.update_org(models=["mock-plain"], web_search=True).models == ["mock-plain"]
        assert client.update_org(models="*").models == "*"

        health = client.deployments()
        assert isinstance(health, DeploymentList) and "mock-chat" in {d.model for d in health.data}

        page = client.audit(limit=2)
        assert isinstance(page, AuditPage) and page.has_more is True
        assert [e.action for e in page.data] == ["org.update", "org.update"]
        older = client.audit(limit=10, after=page.data[-1].id)
        assert [e.action for e in older.data] == ["key.revoke", "key.update", "key.create"]
        assert not older.has_more

        with pytest.raises(ClientValidationError):
            client.create_key("user")


def test_async_client_and_the_refusal_of_other_keys(server: Server) -> None:
    slug = f"adm-{uuid.uuid4().hex[:8]}"
    admin = server.create_key(org=slug, key_type="admin")
    app_key = server.create_key(org=slug)

    async def go() -> None:
        async with AsyncClient(server.base_url, admin, timeout=30) as client:
            created = await client.create_key("admin")
            assert created.type == "admin"
            assert (await client.update_key(created.access_key_id, rpm=5)).rpm == 5
            assert len((await client.list_keys()).data) == 3
            assert (await client.get_org()).slug == slug
            assert [e.action for e in (await client.audit()).data] == ["key.update", "key.create"]
            assert (await client.deployments()).data
        async with AsyncClient(server.base_url, app_key, timeout=30, max_attempts=1) as refused:
            with pytest.raises(PermissionDeniedError) as caught:
                await refused.list_keys()
            assert caught.value.code == "admin_key_required"

    asyncio.run(go())

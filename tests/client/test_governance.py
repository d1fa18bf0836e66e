"""inferd_client's governance methods against the real server: teams made,
changed and deleted, keys put in them with budgets and token limits, `me()` read with such a key,
rotation with and without a grace period, and the errors each refusal maps to (sync and async)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import date, datetime, timedelta, timezone
from typing import Iterator

import pytest

from inferd_client import (APIError, AsyncClient, AuthenticationError, BadRequestError, BudgetExceededError, Client,
                           ClientValidationError, CreatedKey, Me, NotFoundError, PermissionDeniedError, RetryPolicy,
                           Team, TeamDeleted, TeamList, WindowState)
from tests.harness import Server

HELLO = [{"role": "user", "content": "Hello there"}]


def today() -> date:
    """Today in UTC, as the server's periods count it."""
    return datetime.now(timezone.utc).date()


def monday() -> date:
    """The first day of this UTC week (periods of `week` start on Monday)."""
    return today() - timedelta(days=today().weekday())


def midnight(day: date) -> str:
    """A day as the RFC 3339 instant `GET /v1/me` gives a period's bounds in."""
    return f"{day.isoformat()}T00:00:00Z"


def keyed(server: Server, full_key: str) -> Client:
    """A client with `full_key`, sending each request once (a retry would take another window slot)."""
    return Client(server.base_url, full_key, timeout=30, max_attempts=1)


@pytest.fixture()
def slug() -> str:
    """The name of a fresh org."""
    return f"gov-{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def admin(server: Server, slug: str) -> Iterator[Client]:
    """inferd_client with the admin key of a fresh org (retries do not really sleep)."""
    key = server.create_key(org=slug, key_type="admin")
    with Client(server.base_url, key, timeout=30, retry=RetryPolicy(sleep=lambda s: None)) as client:
        yield client


def test_a_team_is_created_read_changed_and_deleted(admin: Client) -> None:
    created = admin.create_team("ops", budget_usd=5, budget_period="week", rpm=10, tpm=1000,
                                models=["mock-chat", "fast"], model_limits={"fast": {"rpm": 3}})
    assert isinstance(created, Team)
    assert (created.name, created.budget_usd, created.budget_period, created.rpm, created.tpm) == (
        "ops", 5.0, "week", 10, 1000)
    assert created.models == ["mock-chat", "fast"]
    assert created.model_limits == {"mock-chat": {"rpm": 3}}  # an alias is stored as its model
    assert created.spend_usd == 0.0
    assert (created.period_start, created.resets_at) == (monday().isoformat(),
                                                         (monday() + timedelta(days=7)).isoformat())
    bare = admin.create_team("bare")
    assert (bare.budget_usd, bare.budget_period, bare.rpm, bare.models, bare.model_limits) == (
        None, "month", None, None, None)

    listed = admin.list_teams()
    assert isinstance(listed, TeamList) and all(isinstance(t, Team) for t in listed.data)
    assert [t.name for t in listed.data] == ["bare", "ops"]  # by name
    assert admin.get_team("ops").to_dict() == created.to_dict()

    # only the arguments given are sent: rpm, models and model_limits stay as they were
    changed = admin.update_team("ops", budget_usd=None, tpm=5, budget_period="total")
    assert (changed.budget_usd, changed.tpm, changed.budget_period, changed.rpm) == (None, 5, "total", 10)
    assert changed.models == ["mock-chat", "fast"] and changed.model_limits == {"mock-chat": {"rpm": 3}}
    assert (changed.period_start, changed.resets_at) == (None, None)
    assert admin.update_team("ops").to_dict() == changed.to_dict()
    assert admin.update_team("ops", models=None, model_limits=None).models is None

    deleted = admin.delete_team("ops")
    assert isinstance(deleted, TeamDeleted) and (deleted.name, deleted.deleted) == ("ops", True)
    with pytest.raises(NotFoundError) as missing:
        admin.get_team("ops")
    assert missing.value.code == "team_not_found" and missing.value.status == 404
    assert [t.name for t in admin.list_teams().data] == ["bare"]
    assert [(e.action, e.target) for e in admin.audit().data] == [
        ("team.delete", "ops"), ("team.update", "ops"), ("team.update", "ops"), ("team.create", "bare"),
        ("team.create", "ops")]


def test_me_describes_a_key_of_a_team_with_its_budgets_and_windows(server: Server, admin: Client,
                                                                   slug: str) -> None:
    admin.create_team("research", budget_usd=3.0, budget_period="day", rpm=50)
    key = admin.create_key(name="svc", team="research", budget_usd=1.0, budget_period="week", rpm=20,
                           tpm=100000, models=["mock-chat"], expires_in="30d")
    assert isinstance(key, CreatedKey) and key.full_key == f"{key.access_key_id}:{key.secret}"
    assert (key.team, key.tpm, key.budget_period, key.models) == ("research", 100000, "week", ["mock-chat"])
    assert (key.period_start, key.resets_at) == (monday().isoformat(), (monday() + timedelta(days=7)).isoformat())
    assert key.expires_at is not None
    expires = datetime.fromisoformat(key.expires_at.replace("Z", "+00:00"))
    assert abs(expires - (datetime.now(timezone.utc) + timedelta(days=30))) < timedelta(minutes=1)

    with keyed(server, key.full_key) as member:
        reply = member.chat("mock-chat", HELLO)
        me = member.me()
    assert reply.usage is not None and reply.usage.total_tokens > 0
    assert isinstance(me, Me)
    assert (me.access_key_id, me.type, me.org, me.team) == (key.access_key_id, "application", slug, "research")
    assert me.models == ["mock-chat"] and me.expires_at == key.expires_at

    assert all(isinstance(w, WindowState) for w in me.limits)
    windows = {(w.scope, w.model): w for w in me.limits}
    assert set(windows) == {("key", None), ("team", None)}
    mine, team = windows["key", None], windows["team", None]
    # the chat and this read each took a slot; the chat's tokens are in the key's token window
    assert (mine.rpm, mine.tpm, mine.remaining_requests) == (20, 100000, 18)
    assert mine.remaining_tokens == 100000 - reply.usage.total_tokens
    assert (team.rpm, team.tpm, team.remaining_requests, team.remaining_tokens) == (50, None, 48, None)

    spent = server.spend(key.full_key)
    assert spent > 0
    assert [b.scope for b in me.budgets] == ["key", "team"]  # the org has no budget
    own, team_budget = me.budget("key"), me.budget("team")
    assert own is not None and team_budget is not None and me.budget("org") is None
    assert (own.budget_usd, own.period, own.spend_usd) == (1.0, "week", pytest.approx(spent))
    assert (own.period_start, own.resets_at) == (midnight(monday()), midnight(monday() + timedelta(days=7)))
    assert (team_budget.budget_usd, team_budget.period, team_budget.spend_usd) == (3.0, "day", pytest.approx(spent))
    assert (team_budget.period_start, team_budget.resets_at) == (midnight(today()),
                                                                 midnight(today() + timedelta(days=1)))
    assert admin.get_team("research").spend_usd == pytest.approx(spent)
    assert admin.get_key(key.access_key_id).spend_usd == pytest.approx(spent)

    mine_as_admin = admin.me()  # an admin key describes itself too
    assert (mine_as_admin.type, mine_as_admin.org, mine_as_admin.team) == ("admin", slug, None)
    assert mine_as_admin.budgets == [] and mine_as_admin.limits == []


def test_me_refuses_user_keys_and_unknown_keys(server: Server, app_key: str) -> None:
    with keyed(server, server.create_user_key(app_key)) as user, pytest.raises(PermissionDeniedError) as refused:
        user.me()
    assert refused.value.code == "key_type_not_permitted"
    with keyed(server, "IFDK" + "0" * 28 + ":" + "0" * 64) as stranger, pytest.raises(AuthenticationError):
        stranger.me()


def test_rotation_keeps_the_old_secret_for_its_grace_only(server: Server, admin: Client) -> None:
    original = admin.create_key(name="rotating", rpm=100)
    rotated = admin.rotate_key(original.access_key_id, grace_s=60)
    assert isinstance(rotated, CreatedKey) and rotated.access_key_id == original.access_key_id
    assert rotated.secret != original.secret and rotated.full_key == f"{rotated.access_key_id}:{rotated.secret}"
    assert (rotated.name, rotated.rpm) == ("rotating", 100)  # the same key: its settings stay
    # within the grace both secrets are the same key
    for full_key in (original.full_key, rotated.full_key):
        with keyed(server, full_key) as client:
            assert client.me().access_key_id == original.access_key_id

    newest = admin.rotate_key(original.access_key_id)  # grace 0: every earlier secret stops at once
    for full_key in (original.full_key, rotated.full_key):
        with keyed(server, full_key) as client, pytest.raises(AuthenticationError) as refused:
            client.me()
        assert refused.value.code == "invalid_api_key"
    with keyed(server, newest.full_key) as client:
        assert client.chat("mock-chat", HELLO).usage is not None
    rotations = [e.details for e in admin.audit().data if e.action == "key.rotate"]
    assert rotations == [{"grace_s": 0}, {"grace_s": 60}]
    assert rotated.secret not in str([e.to_dict() for e in admin.audit(limit=100).data])


def test_key_settings_are_sent_as_given_and_refusals_map_to_errors(server: Server, admin: Client) -> None:
    admin.create_team("narrow", models=["mock-plain", "mock-chat"])
    with pytest.raises(NotFoundError) as unknown:
        admin.create_key(team="ghost")
    assert unknown.value.code == "team_not_found"
    with pytest.raises(BadRequestError) as wider:
        admin.create_key(team="narrow", models=["mock-reason"])
    assert wider.value.code == "model_not_allowed" and "mock-reason" in wider.value.message
    with pytest.raises(ClientValidationError):
        admin.create_key(models="mock-chat")  # one string, not a list: refused before sending
    assert len(admin.list_keys().data) == 1  # only the admin: nothing above was created

    key = admin.create_key()
    expiry = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    updated = admin.update_key(key.access_key_id, team="narrow", tpm=500, budget_period="day",
                               model_limits={"fast": {"tpm": 50}}, expires_at=expiry)
    assert (updated.team, updated.tpm, updated.budget_period) == ("narrow", 500, "day")
    assert updated.model_limits == {"mock-chat": {"tpm": 50}}
    assert updated.expires_at is not None and updated.expires_at.startswith("2030-01-02T01:04:05")  # in UTC
    # None removes; what is not given stays
    cleared = admin.update_key(key.access_key_id, expires_at=None, model_limits=None)
    assert (cleared.expires_at, cleared.model_limits, cleared.team, cleared.tpm) == (None, None, "narrow", 500)

    with pytest.raises(APIError) as in_use:
        admin.delete_team("narrow")
    assert (in_use.value.status, in_use.value.code) == (409, "team_in_use")
    with pytest.raises(APIError) as taken:
        admin.create_team("narrow")
    assert (taken.value.status, taken.value.code) == (409, "team_exists")
    assert admin.update_key(key.access_key_id, team=None).team is None
    assert admin.delete_team("narrow").deleted is True

    for call in (lambda: admin.get_team("nope"), lambda: admin.update_team("nope", rpm=1),
                 lambda: admin.delete_team("nope")):
        with pytest.raises(NotFoundError) as missing:
            call()
        assert missing.value.code == "team_not_found"
    for bad_name in ("", ".", ".."):  # would reach another route than the team's
        with pytest.raises(ClientValidationError):
            admin.get_team(bad_name)
    with pytest.raises(BadRequestError):
        admin.create_team("a/b")  # the server's rule for names
    with pytest.raises(NotFoundError) as no_key:
        admin.rotate_key("IFDK" + "0" * 28)
    assert no_key.value.code == "key_not_found"
    with pytest.raises(BadRequestError):
        admin.rotate_key(key.access_key_id, grace_s=-1)
    admin.revoke_key(key.access_key_id)
    with pytest.raises(BadRequestError) as revoked:
        admin.rotate_key(key.access_key_id)
    assert revoked.value.code == "key_revoked"

    with keyed(server, admin.create_key().full_key) as application, \
            pytest.raises(PermissionDeniedError) as not_admin:
        application.list_teams()
    assert not_admin.value.code == "admin_key_required"


def test_async_client_governs_a_team_budget(server: Server, slug: str) -> None:
    admin_key = server.create_key(org=slug, key_type="admin")

    async def go() -> None:
        async with AsyncClient(server.base_url, admin_key, timeout=30) as admin:
            team = await admin.create_team("tight", budget_usd=0.000001, budget_period="total", tpm=100000)
            assert isinstance(team, Team) and (team.period_start, team.resets_at) == (None, None)
            key = await admin.create_key(team="tight", budget_usd=5.0, tpm=1000)
            assert (key.team, key.tpm, key.budget_period) == ("tight", 1000, "month")
            async with AsyncClient(server.base_url, key.full_key, timeout=30, max_attempts=1) as member:
                await member.chat("mock-chat", HELLO)  # spent at its start only: admitted
                with pytest.raises(BudgetExceededError) as refused:
                    await member.chat("mock-chat", HELLO)
                assert refused.value.code == "budget_exceeded" and "team" in refused.value.message
                me = await member.me()
            assert isinstance(me, Me) and me.team == "tight"
            spent = me.budget("team")
            assert spent is not None and (spent.period, spent.period_start, spent.resets_at) == ("total", None, None)
            assert spent.spend_usd >= spent.budget_usd == 0.000001
            assert {(w.scope, w.tpm) for w in me.limits} == {("key", 1000), ("team", 100000)}

            rotated = await admin.rotate_key(key.access_key_id)
            async with AsyncClient(server.base_url, key.full_key, timeout=30, max_attempts=1) as old:
                with pytest.raises(AuthenticationError):
                    await old.me()
            lifted = await admin.update_team("tight", budget_usd=None)
            assert lifted.budget_usd is None and lifted.tpm == 100000
            async with AsyncClient(server.base_url, rotated.full_key, timeout=30, max_attempts=1) as new:
                assert (await new.me()).access_key_id == key.access_key_id
                assert (await new.chat("mock-chat", HELLO)).usage is not None  # the team's budget is gone

            assert [t.name for t in (await admin.list_teams()).data] == ["tight"]
            await admin.revoke_key(key.access_key_id)  # a revoked key no longer holds its team
            assert (await admin.delete_team("tight")).deleted is True
            with pytest.raises(NotFoundError):
                await admin.get_team("tight")

    asyncio.run(go())

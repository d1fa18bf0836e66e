"""Administration of one org by its admin key: keys, org settings, the
deployments' health and the audit log.

Every change is written with its audit entry in one transaction and goes through
`KeyRepository.propagate`, so the next request on any replica obeys it. Keys of another org, and
user keys (minted by the exchange, never administered), are 404: an admin cannot tell another
org's key ids from unknown ones.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Mapping

from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.auth.key_record import KeyRecord
from inferd.auth.keys import hash_secret, mint
from inferd.catalogue import ModelCatalogue
from inferd.errors import InvalidRequest, NotFound, OperatorLimit, UserAlreadyLinked
from inferd.limits.periods import since
from inferd.services.key_settings import key_changes, period_fields, shown_settings, utc_naive
from inferd.services.model_lists import NamesOf, known, names_in, narrowed
from inferd.store.audit import AuditEntry, AuditLog, AuditRecord
from inferd.store.db import iso
from inferd.store.keys import KeyRepository, KeyView
from inferd.store.orgs import Org, OrgRepository, models_setting, update_settings
from inferd.store.teams import TeamRepository
from inferd.store.users import UserRepository


def key_object(view: KeyView) -> dict[str, Any]:
    """The wire form of a key (never its secret)."""
    return {"access_key_id": view.access_key_id, "name": view.name, "type": view.type,
            "user_email": view.user_email, "budget_usd": view.budget_usd, "rpm": view.rpm,
            "created_at": iso(view.created_at), "revoked_at": iso(view.revoked_at) if view.revoked_at else None,
            "spend_usd": round(view.spend_usd, 10),  # a float sum, rounded like the usage summary
            "team": view.team, "tpm": view.tpm, "budget_period": view.budget_period,
            "models": list(view.models) if view.models is not None else None, "model_limits": view.model_limits,
            "expires_at": iso(view.expires_at) if view.expires_at else None, **period_fields(view.budget_period)}


def org_object(org: Org) -> dict[str, Any]:
    """The wire form of an org's settings (`models`: what its keys may use, the operator's list as its
    admin narrowed it)."""
    return {"slug": org.slug, "models": models_setting(org.models), "file_attachments": org.file_attachments,
            "web_search": org.web_search}


def audit_object(record: AuditRecord) -> dict[str, Any]:
    """The wire form of an audit entry."""
    return {"id": record.id, "at": iso(record.at), "actor": record.actor, "action": record.action,
            "target": record.target, "details": record.details}


def _wall_clock(monotonic_s: float) -> str | None:
    """A pool's cooldown end (monotonic seconds) as RFC 3339 UTC; None when already past."""
    left = monotonic_s - time.monotonic()
    if left <= 0:
        return None
    return iso(datetime.fromtimestamp(time.time() + left, timezone.utc).replace(tzinfo=None))


class Administration:
    """What an admin key may read and change, all within its own org."""

    def __init__(self, db: AsyncEngine, keys: KeyRepository, orgs: OrgRepository, catalogue: ModelCatalogue,
                 settle_usage: Callable[[], Awaitable[None]]) -> None:
        self._db = db
        self._settle_usage = settle_usage  # before a read of spend: rows still in a journal count
        self._keys = keys
        self._orgs = orgs
        self._catalogue = catalogue
        self._teams = TeamRepository(db, keys)
        self._names_of: NamesOf = names_in(model.config for model in catalogue.models)

    async def list_keys(self, admin: KeyRecord) -> list[dict[str, Any]]:
        """The org's application and admin keys, oldest first, revoked ones included."""
        await self._settle_usage()
        return [key_object(view) for view in await self._keys.administered(admin.org_id, since)]

    async def get_key(self, admin: KeyRecord, access_key_id: str) -> dict[str, Any]:
        """One key of the org (404 otherwise)."""
        return key_object(await self._view(admin, access_key_id))

    async def _view(self, admin: KeyRecord, access_key_id: str) -> KeyView:
        await self._settle_usage()
        found = await self._keys.administered(admin.org_id, since, access_key_id)
        if not found:
            raise NotFound(f"No key '{access_key_id}' in your organisation", code="key_not_found")
        return found[0]

    async def create_key(self, admin: KeyRecord, key_type: str, name: str | None, user_email: str | None,
                         budget_usd: float | None, rpm: int | None,
                         governance: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Mint a key in the admin's org; the answer is the only place its secret ever appears. A user
        that an idp subject already owns is refused (403 `user_already_linked`): the key would mint
        that user's keys on the exchange and so act as them. `governance`: the governance fields
        (team, tpm, budget_period, models, expires_in or expires_at), checked before anything is written."""
        settings = await key_changes(self._teams, await self._org(admin), self._wire(governance or {}),
                                     self._names_of)
        user_id = None
        if user_email:
            user_id, linked = await UserRepository(self._db).email_user(admin.org_id, user_email)
            if linked:
                raise UserAlreadyLinked(user_email)
        access_key_id, secret = mint()
        details = {"type": key_type, "name": name, "user_email": user_email, "budget_usd": budget_usd, "rpm": rpm,
                   **shown_settings(governance or {}, settings)}
        await self._keys.create(access_key_id=access_key_id, secret_hash=hash_secret(secret), key_type=key_type,
                                org_id=admin.org_id, name=name, user_id=user_id, budget_usd=budget_usd, rpm=rpm,
                                audit=AuditEntry(admin.access_key_id, "key.create", access_key_id, details),
                                **settings)
        created = key_object(await self._view(admin, access_key_id))
        return {**created, "secret": secret, "full_key": f"{access_key_id}:{secret}"}

    async def update_key(self, admin: KeyRecord, access_key_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Change a key's name, budget, rpm, and the governance fields team, tpm, budget_period, models and
        expiry (None removes a limit); everything is checked before anything is written."""
        view = await self._view(admin, access_key_id)
        changes = await key_changes(self._teams, await self._org(admin), self._wire(changes), self._names_of,
                                    view.team, view.models)
        if not await self._keys.update(access_key_id, admin.org_id, changes, admin.access_key_id):
            raise NotFound(f"No key '{access_key_id}' in your organisation", code="key_not_found")
        return await self.get_key(admin, access_key_id)

    async def revoke_key(self, admin: KeyRecord, access_key_id: str) -> dict[str, Any]:
        """Revoke a key: 401 from its next request on. Revoking a revoked key changes nothing."""
        view = await self._view(admin, access_key_id)
        if view.revoked_at is None:
            await self._keys.revoke(access_key_id, actor=admin.access_key_id, org_id=admin.org_id)
        return await self.get_key(admin, access_key_id)

    async def rotate_key(self, admin: KeyRecord, access_key_id: str, grace_s: float) -> dict[str, Any]:
        """Give a key of the org a new secret, its old one valid `grace_s` seconds more;
        the answer is the only place the new secret appears. A revoked key is 400
        `key_revoked`: a new secret would not bring it back."""
        view = await self._view(admin, access_key_id)
        if view.revoked_at is not None:
            raise InvalidRequest(f"Key '{access_key_id}' is revoked: it cannot be rotated", code="key_revoked")
        secret = mint()[1]  # only the secret: the id, and with it usage and limits, stay
        if not await self._keys.rotate(access_key_id, admin.org_id, hash_secret(secret), grace_s,
                                       admin.access_key_id):
            # revoked meanwhile (the view was read before): the same answer as above
            raise InvalidRequest(f"Key '{access_key_id}' is revoked: it cannot be rotated", code="key_revoked")
        rotated = await self.get_key(admin, access_key_id)
        return {**rotated, "secret": secret, "full_key": f"{access_key_id}:{secret}"}

    async def _org(self, admin: KeyRecord) -> Org:
        org = await self._orgs.get(admin.org_id)
        if org is None:  # the key's org row is gone: nothing to administer
            raise NotFound("Your organisation no longer exists", code="org_not_found")
        return org

    @staticmethod
    def _wire(given: Mapping[str, Any]) -> dict[str, Any]:
        """Decision 23's key fields as sent, `expires_at` in naive UTC."""
        return {**given, "expires_at": utc_naive(given["expires_at"])} if "expires_at" in given else dict(given)

    async def org(self, admin: KeyRecord) -> dict[str, Any]:
        """The admin's org settings."""
        return org_object(await self._org(admin))

    async def update_org(self, admin: KeyRecord, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Narrow the org's allow-list within the operator's (`"*"`: all of it; wider: 403
        `operator_limit`) and change its feature flags. Its budget is the operator's (403 `operator_limit`)."""
        settings = dict(changes)
        for name in ("budget_usd", "budget_period"):
            if name in settings:
                raise OperatorLimit(f"{name}: the organisation's budget is set by the operator (inferd orgs update)",
                                    param=name)
        for name, value in settings.items():
            if value is None:
                raise InvalidRequest(f"{name}: may not be null", param=name)
        if "models" in settings:
            models = settings.pop("models")
            operator = (await self._org(admin)).allowed_models
            settings["admin_models"] = None if models == "*" else narrowed(known(models, self._names_of), operator,
                                                                           self._names_of)
        org = await self._keys.propagate(lambda conn: update_settings(conn, admin.org_id, settings,
                                                                      admin.access_key_id), "org")
        if org is None:
            raise NotFound("Your organisation no longer exists", code="org_not_found")
        return org_object(org)

    def deployments(self, admin: KeyRecord) -> list[dict[str, Any]]:
        """The health, as this server's pools see it, of every deployment of the models the admin's
        org may use (its allow-list, by id or alias, checked as calls are)."""
        health = []
        for model in self._catalogue.models:
            if not self._catalogue.allowed(admin, model):
                continue
            pool = model.pool
            for index, state in enumerate(pool.states):
                health.append({"model": model.id, "deployment": state.name, "up": pool.healthy(index),
                               "in_flight": state.in_flight, "failures": sum(state.failures.values()),
                               "failures_by_reason": dict(state.failures),
                               "cooldown_until": _wall_clock(state.cooldown_until)})
        return health

    async def audit(self, admin: KeyRecord, limit: int, after: int | None) -> dict[str, Any]:
        """A page of the org's audit log, newest first."""
        records, has_more = await AuditLog(self._db).page(admin.org_id, limit, after)
        return {"object": "list", "data": [audit_object(r) for r in records], "has_more": has_more}

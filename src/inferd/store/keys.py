"""Long-lived and user keys: create, revoke, rotate, and the admin's view and changes (the per-request
lookup is auth/key_lookup.py's)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from sqlalchemy import delete, exists, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.audit import AuditEntry, write_entry
from inferd.store.db import as_datetime, utcnow
from inferd.store.key_cache import KEYS_CHANNEL, KeyCache
from inferd.store.key_limits import (DEFAULT_PERIOD, decode_model_limits, decode_models, encode_model_limits,
                                     encode_models)
from inferd.store.tables import api_keys, spend, teams, users

T = TypeVar("T")
ADMINISTERED_TYPES = ("application", "admin")  # user keys are minted by the exchange, not administered
# What an admin may change on a key (`models` a tuple or None, `team_id` a team of the key's org).
KEY_SETTINGS = ("name", "budget_usd", "rpm", "team_id", "tpm", "budget_period", "models", "model_limits",
                "expires_at")
MAX_ROTATION_GRACE_S = 366 * 86400  # a rotated-out secret stays valid at most a year (a bound, not a policy)


@dataclass(frozen=True)
class KeyView:
    """A long-lived key as its org's admin sees it: never its secret or hash."""

    access_key_id: str
    name: str | None
    type: str
    user_email: str | None
    budget_usd: float | None
    rpm: int | None
    created_at: datetime
    revoked_at: datetime | None
    spend_usd: float  # in its budget's period under way
    team: str | None = None
    tpm: int | None = None
    budget_period: str = DEFAULT_PERIOD
    models: tuple[str, ...] | None = None
    model_limits: dict[str, dict[str, Any]] | None = None
    expires_at: datetime | None = None


async def _shown(conn: AsyncConnection, name: str, value: Any) -> Any:
    """A stored key setting as the audit log shows it: a team by its name, models as a list."""
    if value is None:
        return None
    if name == "team_id":
        return (await conn.execute(select(teams.c.name).where(teams.c.id == value))).scalar()
    if name == "models":
        return list(decode_models(value) or ())
    if name == "model_limits":
        return decode_model_limits(value)
    return value


class KeyRepository:
    """Reads and writes `api_keys`. Every change to what a key's lookup returns (auth/key_lookup.py)
    goes through `propagate`, which drops the PostgreSQL key cache on every server."""

    def __init__(self, engine: AsyncEngine, cache: KeyCache[Any] | None = None) -> None:
        self._engine = engine
        self._cache = cache  # the key lookup's (PostgreSQL): changes drop it on every server

    async def create(self, *, access_key_id: str, secret_hash: str, key_type: str, org_id: int,
                     name: str | None = None, user_id: int | None = None, budget_usd: float | None = None,
                     rpm: int | None = None, parent_key_id: int | None = None,
                     expires_at: datetime | None = None, audit: AuditEntry | None = None,
                     team_id: int | None = None, tpm: int | None = None, budget_period: str | None = None,
                     models: tuple[str, ...] | None = None,
                     model_limits: dict[str, dict[str, int]] | None = None) -> int:
        """Store a new key (its secret only as a hash), and `audit` in the same transaction; returns the row id."""
        async with self._engine.begin() as conn:
            result = await conn.execute(insert(api_keys).values(
                access_key_id=access_key_id, secret_hash=secret_hash, type=key_type, org_id=org_id, name=name,
                user_id=user_id, budget_usd=budget_usd, rpm=rpm, parent_key_id=parent_key_id,
                expires_at=expires_at, created_at=utcnow(), team_id=team_id, tpm=tpm, budget_period=budget_period,
                models=encode_models(models), model_limits=encode_model_limits(model_limits)))
            if audit is not None:
                await write_entry(conn, org_id, audit)
            return int(result.inserted_primary_key[0])

    async def revoke(self, access_key_id: str, actor: str | None = None, org_id: int | None = None) -> bool:
        """Mark a key revoked (of org `org_id` only, when given), recording `key.revoke` by `actor`
        when given; False when no such live key exists."""

        async def write(conn: AsyncConnection) -> bool:
            where = [api_keys.c.access_key_id == access_key_id, api_keys.c.revoked_at.is_(None)]
            if org_id is not None:
                where.append(api_keys.c.org_id == org_id)
            owner = (await conn.execute(select(api_keys.c.org_id).where(*where))).scalar()
            if owner is None:
                return False
            await conn.execute(update(api_keys).where(*where).values(revoked_at=utcnow()))
            if actor is not None:
                await write_entry(conn, int(owner), AuditEntry(actor, "key.revoke", access_key_id))
            return True

        return await self.propagate(write, access_key_id)

    async def update(self, access_key_id: str, org_id: int | None, changes: Mapping[str, Any], actor: str) -> bool:
        """Set some of a long-lived key's KEY_SETTINGS (None removes a limit), recording `key.update` by
        `actor` with each changed value's before and after (a team by its name); False when there is
        no such key (in org `org_id`, when given)."""

        async def write(conn: AsyncConnection) -> bool:
            where = [api_keys.c.access_key_id == access_key_id, api_keys.c.type.in_(ADMINISTERED_TYPES)]
            if org_id is not None:
                where.append(api_keys.c.org_id == org_id)
            before = (await conn.execute(select(api_keys.c.org_id, *(api_keys.c[name] for name in KEY_SETTINGS))
                                         .where(*where))).mappings().first()
            if before is None:
                return False
            values = {name: changes[name] for name in KEY_SETTINGS if name in changes}
            if values:
                stored = dict(values)
                if "models" in values:
                    stored["models"] = encode_models(values["models"])
                if "model_limits" in values:
                    stored["model_limits"] = encode_model_limits(values["model_limits"])
                await conn.execute(update(api_keys).where(*where).values(**stored))
                details = {}
                for name in values:
                    shown = "team" if name == "team_id" else name
                    details[shown] = {"from": await _shown(conn, name, before[name]),
                                      "to": await _shown(conn, name, stored[name])}
                await write_entry(conn, int(before["org_id"]), AuditEntry(actor, "key.update", access_key_id,
                                                                          details))
            return True

        return await self.propagate(write, access_key_id)

    async def rotate(self, access_key_id: str, org_id: int | None, new_hash: str, grace_s: float,
                     actor: str) -> bool:
        """Give a live application or admin key (of org `org_id`, when given) the secret hashed as
        `new_hash`, keeping its id and so its usage, spend and windows; its old secret stays valid
        for `grace_s` seconds (0: not at all), and `key.rotate` by `actor` is recorded. False when
        there is no such live key. A second rotation within the grace drops the oldest secret:
        only the one just replaced stays valid."""

        async def write(conn: AsyncConnection) -> bool:
            where = [api_keys.c.access_key_id == access_key_id, api_keys.c.type.in_(ADMINISTERED_TYPES),
                     api_keys.c.revoked_at.is_(None)]
            if org_id is not None:
                where.append(api_keys.c.org_id == org_id)
            before = (await conn.execute(select(api_keys.c.org_id, api_keys.c.secret_hash).where(*where))).first()
            if before is None:
                return False
            previous, until = None, None
            if grace_s > 0:
                previous, until = before.secret_hash, utcnow() + timedelta(seconds=grace_s)
            await conn.execute(update(api_keys).where(*where).values(
                secret_hash=new_hash, previous_secret_hash=previous, previous_secret_until=until))
            await write_entry(conn, int(before.org_id), AuditEntry(actor, "key.rotate", access_key_id,
                                                                   {"grace_s": grace_s}))
            return True

        return await self.propagate(write, access_key_id)

    async def propagate(self, write: Callable[[AsyncConnection], Awaitable[T]], what: str = "") -> T:
        """Run `write` in one transaction with a NOTIFY that drops every server's key cache at its
        commit (PostgreSQL), for any change to what `lookup` returns: a revocation, a key's limits,
        its org's allow-list. This server answers only once its own listener heard it, so the next
        request obeys the change on every replica."""
        generation = await self._cache.generation() if self._cache is not None else 0
        async with self._engine.begin() as conn:
            result = await write(conn)
            if conn.dialect.name == "postgresql":
                await conn.execute(text("SELECT pg_notify(:channel, :key)"), {"channel": KEYS_CHANNEL, "key": what})
        if self._cache is not None:
            await self._cache.heard(generation)
        return result

    async def delete_expired_user_keys(self, before: datetime) -> int:
        """Delete the user keys that expired before `before` (the sweep); returns how many. Nothing
        refers to one once it expired: its usage rows and spend are its parent key's (with the
        user's id), its conversations and sources its user's, and a user key mints no other (the
        check stays, so the foreign key could never refuse the delete)."""
        child = api_keys.alias("child")
        async with self._engine.begin() as conn:
            result = await conn.execute(delete(api_keys).where(
                api_keys.c.type == "user", api_keys.c.expires_at < before,
                ~exists().where(child.c.parent_key_id == api_keys.c.id)))
        return int(result.rowcount or 0)

    async def org_of(self, access_key_id: str) -> int | None:
        """The org id of an application or admin key, or None when there is no such key."""
        async with self._engine.connect() as conn:
            return (await conn.execute(select(api_keys.c.org_id).where(
                api_keys.c.access_key_id == access_key_id, api_keys.c.type.in_(ADMINISTERED_TYPES)))).scalar()

    async def administered(self, org_id: int, since: Callable[[str], str | None],
                           access_key_id: str | None = None) -> list["KeyView"]:
        """The org's application and admin keys (user keys minted by the exchange are short-lived and
        charged to their parent, so they are not listed), oldest first, each with its spend since
        `since(its budget period)` (YYYY-MM-DD, None: ever); one key when `access_key_id` is given
        (none when it is not the org's)."""
        stmt = (select(api_keys.c.access_key_id, api_keys.c.name, api_keys.c.type, users.c.email,
                       api_keys.c.budget_usd, api_keys.c.rpm, api_keys.c.created_at, api_keys.c.revoked_at,
                       teams.c.name, api_keys.c.tpm, api_keys.c.budget_period, api_keys.c.models,
                       api_keys.c.model_limits, api_keys.c.expires_at)
                .select_from(api_keys.outerjoin(users, users.c.id == api_keys.c.user_id)
                             .outerjoin(teams, teams.c.id == api_keys.c.team_id))
                .where(api_keys.c.org_id == org_id, api_keys.c.type.in_(ADMINISTERED_TYPES))
                .order_by(api_keys.c.id))
        if access_key_id is not None:
            stmt = stmt.where(api_keys.c.access_key_id == access_key_id)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
            spent: dict[str, float] = {}
            if rows:
                firsts = {row[0]: since(row[10] or DEFAULT_PERIOD) or "" for row in rows}
                days = await conn.execute(select(spend.c.owner, spend.c.day, spend.c.spend_usd).where(
                    spend.c.scope == "key", spend.c.owner.in_(list(firsts)), spend.c.day >= min(firsts.values())))
                for owner, day, usd in days:
                    if day >= firsts[owner]:
                        spent[owner] = spent.get(owner, 0.0) + usd
        return [KeyView(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], spent.get(row[0], 0.0),
                        team=row[8], tpm=row[9], budget_period=row[10] or DEFAULT_PERIOD,
                        models=decode_models(row[11]), model_limits=decode_model_limits(row[12]) or None,
                        expires_at=as_datetime(row[13]))
                for row in rows]

    async def close(self) -> None:
        """Close the PostgreSQL listener (the hot SQLite connection belongs to its creator)."""
        if self._cache is not None:
            await self._cache.close()

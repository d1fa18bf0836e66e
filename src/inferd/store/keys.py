"""Long-lived and user keys: the per-request lookup, create, revoke, and the admin's view and changes."""

from __future__ import annotations

import asyncio

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from sqlalchemy import delete, exists, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.audit import AuditEntry, write_entry
from inferd.store.db import utcnow
from inferd.store.hot_sqlite import HotSqlite, is_busy
from inferd.store.key_cache import KEYS_CHANNEL, KeyCache
from inferd.store.key_limits import (DEFAULT_PERIOD, Budget, Window, decode_model_limits, decode_models,
                                     encode_model_limits, encode_models)
from inferd.store.orgs import decode_allowed, effective_models
from inferd.store.tables import api_keys, spend, teams, users

T = TypeVar("T")
ADMINISTERED_TYPES = ("application", "admin")  # user keys are minted by the exchange, not administered
# What an admin may change on a key (`models` a tuple or None, `team_id` a team of the key's org).
KEY_SETTINGS = ("name", "budget_usd", "rpm", "team_id", "tpm", "budget_period", "models", "model_limits",
                "expires_at")
MAX_ROTATION_GRACE_S = 366 * 86400  # a rotated-out secret stays valid at most a year (a bound, not a policy)


@dataclass(frozen=True)
class KeyRecord:
    """A key joined with its org, its team and, for user keys, the key it is charged to."""

    id: int
    access_key_id: str
    secret_hash: str
    type: str
    org_id: int
    org_slug: str
    allowed_models: tuple[str, ...] | None  # the org's (the operator's ceiling, narrowed by its admin)
    user_id: int | None
    revoked: bool
    expires_at: datetime | None
    charged_key_id: str  # the key whose budget pays (the parent for user keys)
    budget_usd: float | None
    rpm: int | None
    # The requests-per-minute window this key counts against: its own for a long-lived key; for a
    # user key, one per (parent key, user), so minting more keys never multiplies a user's rate.
    rate_window: str
    team_id: int | None = None  # the charged key's team
    team_name: str | None = None
    tpm: int | None = None
    team_models: tuple[str, ...] | None = None
    key_models: tuple[str, ...] | None = None
    budgets: tuple[Budget, ...] = ()  # every budget a metered call falls under: key, team, org
    windows: tuple[Window, ...] = ()  # every window a call counts in: key, team (those with a limit)
    model_windows: tuple[Window, ...] = ()  # per-model windows of the key and its team
    token_windows: tuple[Window, ...] = ()  # the windows (of `windows`) with a tpm: a call's tokens count there
    previous_secret_hash: str | None = None  # a rotated key's old secret, valid until previous_secret_until
    previous_secret_until: datetime | None = None


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


HOT_KEYS = 4096  # keys kept on SQLite (all dropped when full: a bound, not an eviction policy)
_LOOKUP = """
SELECT k.id, k.access_key_id, k.secret_hash, k.type, k.org_id, o.slug, o.allowed_models, o.admin_models,
       o.budget_usd, o.budget_period, k.user_id, k.revoked_at, k.expires_at,
       k.budget_usd, k.rpm, k.tpm, k.budget_period, k.models, k.model_limits, k.previous_secret_hash,
       k.previous_secret_until,
       p.access_key_id, p.budget_usd, p.rpm, p.revoked_at, p.expires_at, p.tpm, p.budget_period, p.models,
       p.model_limits,
       t.id, t.name, t.budget_usd, t.budget_period, t.rpm, t.tpm, t.models, t.model_limits
FROM api_keys k JOIN orgs o ON o.id = k.org_id LEFT JOIN api_keys p ON p.id = k.parent_key_id
LEFT JOIN teams t ON t.id = COALESCE(p.team_id, k.team_id)
WHERE k.access_key_id = {param}
"""


def _when(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


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


def _model_windows(scope: str, owner: str, stored: str | None) -> list[Window]:
    return [Window(scope, f"{owner}/model/{model}", limits.get("rpm"), limits.get("tpm"), model)
            for model, limits in decode_model_limits(stored).items()]


def _record(row: tuple[Any, ...]) -> KeyRecord:
    (key_id, access_key_id, secret_hash, key_type, org_id, slug, allowed, admin_models, org_budget, org_period,
     user_id, revoked_at, expires_at, budget, rpm, tpm, period, models, model_limits, previous_hash, previous_until,
     parent_access, parent_budget, parent_rpm, parent_revoked, parent_expires, parent_tpm, parent_period,
     parent_models, parent_model_limits,
     team_id, team_name, team_budget, team_period, team_rpm, team_tpm, team_models, team_model_limits) = row
    has_parent = parent_access is not None
    if has_parent:
        budget, rpm, tpm, period, models, model_limits = (parent_budget, parent_rpm, parent_tpm, parent_period,
                                                          parent_models, parent_model_limits)
    charged = parent_access if has_parent else access_key_id
    rate_window = f"{parent_access}/user/{user_id}" if has_parent else access_key_id
    budgets = []
    if budget is not None:
        budgets.append(Budget("key", charged, charged, float(budget), period or DEFAULT_PERIOD))
    windows = []
    if rpm is not None or tpm is not None:
        windows.append(Window("key", rate_window, rpm, tpm))
    model_windows = _model_windows("key", rate_window, model_limits)
    if team_id is not None:
        if team_budget is not None:
            budgets.append(Budget("team", str(team_id), team_name, float(team_budget), team_period or DEFAULT_PERIOD))
        if team_rpm is not None or team_tpm is not None:
            windows.append(Window("team", f"team:{team_id}", team_rpm, team_tpm))
        model_windows += _model_windows("team", f"team:{team_id}", team_model_limits)
    if org_budget is not None:
        budgets.append(Budget("org", slug, slug, float(org_budget), org_period or DEFAULT_PERIOD))
    expired_parent = has_parent and parent_expires is not None and _when(parent_expires) <= utcnow()
    return KeyRecord(
        id=key_id, access_key_id=access_key_id, secret_hash=secret_hash, type=key_type, org_id=org_id,
        org_slug=slug, allowed_models=effective_models(decode_allowed(allowed), decode_models(admin_models)),
        user_id=user_id,
        revoked=revoked_at is not None or (has_parent and parent_revoked is not None) or bool(expired_parent),
        expires_at=_when(expires_at), charged_key_id=charged, budget_usd=budget, rpm=rpm, rate_window=rate_window,
        team_id=team_id, team_name=team_name, tpm=tpm, team_models=decode_models(team_models),
        key_models=decode_models(models), budgets=tuple(budgets), windows=tuple(windows),
        token_windows=tuple(window for window in windows if window.tpm is not None),
        model_windows=tuple(model_windows), previous_secret_hash=previous_hash,
        previous_secret_until=_when(previous_until),
    )


class KeyRepository:
    """Reads and writes `api_keys`.

    The lookup runs on every request, and a revoked key must fail on the very next request,
    whichever process revoked it. On SQLite it reads through the hot path's synchronous
    connection (never waiting on writers), and found keys are kept while that connection's
    `PRAGMA data_version` stays the same: it changes whenever any other connection, of this
    process or another (a revocation, a key or org update), commits to the database, and not for
    the connection's own usage commits. At c=64 the join was 7% of the server's samples (the
    write-ahead log of usage commits makes its page reads dearer); the check costs a few
    microseconds. On PostgreSQL found keys are cached and every revocation sends a NOTIFY in its
    own transaction; the listener drops the cache when one arrives, and the cache is off
    whenever the listener is not connected.
    """

    def __init__(self, engine: AsyncEngine, hot: HotSqlite | None = None, pg_cache: bool = False) -> None:
        self._engine = engine
        self._hot = hot
        self._cache = KeyCache(engine) if pg_cache and engine.dialect.name == "postgresql" else None
        self._sqlite_lookup = _LOOKUP.format(param="?")
        self._sql_lookup = text(_LOOKUP.format(param=":access_key_id"))
        self._hot_keys: dict[str, KeyRecord] = {}
        self._hot_version = -1
        self._reading: dict[tuple[str, int], asyncio.Future[KeyRecord | None]] = {}  # PostgreSQL reads under way

    async def lookup(self, access_key_id: str) -> KeyRecord | None:
        """The key with this access key id, or None."""
        if self._hot is not None:
            try:
                conn = self._hot.conn
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._hot_version:
                    self._hot_keys.clear()
                    self._hot_version = version
                record = self._hot_keys.get(access_key_id)
                if record is None:
                    row = conn.execute(self._sqlite_lookup, (access_key_id,)).fetchone()
                    if not row:
                        return None
                    if len(self._hot_keys) >= HOT_KEYS:
                        self._hot_keys.clear()
                    record = self._hot_keys[access_key_id] = _record(tuple(row))
                return record
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise  # otherwise read through the async engine, which may wait
        cache = self._cache
        if cache is not None:
            cached = cache.get(access_key_id)
            if cached is not None:
                return cached
            # A burst on a key not cached yet (a new key, or after a revocation dropped the cache)
            # reads it once, not once per call: each read holds a pooled connection, and forty at
            # once ran the database out of connections.
            # A read that began before a revocation arrived is not joined: it may return the old row.
            slot = (access_key_id, cache.invalidations)
            reading = self._reading.get(slot)
            if reading is None:
                reading = self._reading[slot] = asyncio.ensure_future(self._read(access_key_id, cache))
                reading.add_done_callback(lambda _: self._reading.pop(slot, None))
            return await asyncio.shield(reading)
        return await self._read(access_key_id, None)

    async def _read(self, access_key_id: str, cache: KeyCache | None) -> KeyRecord | None:
        """Read one key from the database (and cache it, unless a revocation arrived meanwhile)."""
        generation = await cache.generation() if cache is not None else 0
        async with self._engine.connect() as conn:
            row = (await conn.execute(self._sql_lookup, {"access_key_id": access_key_id})).first()
        record = _record(tuple(row)) if row else None
        if cache is not None and record is not None:
            cache.put(record, generation)
        return record

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
                        expires_at=_when(row[13]))
                for row in rows]

    async def close(self) -> None:
        """Close the PostgreSQL listener (the hot SQLite connection belongs to its creator)."""
        if self._cache is not None:
            await self._cache.close()

"""Organisations: slug, allowed models, feature flags, and the operator's budget.

Two allow-lists: `allowed_models`, the operator's (the command line's) ceiling, and `admin_models`,
what the org's admin narrowed it to; calls obey both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import orjson
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.audit import AuditEntry, write_entry
from inferd.store.db import utcnow
from inferd.store.key_limits import DEFAULT_PERIOD, decode_models, encode_models
from inferd.store.tables import orgs


@dataclass(frozen=True)
class Org:
    """An organisation as the service uses it."""

    id: int
    slug: str
    allowed_models: tuple[str, ...] | None  # None: every model
    file_attachments: bool
    web_search: bool
    budget_usd: float | None = None  # the operator's, for the whole org
    budget_period: str = DEFAULT_PERIOD
    admin_models: tuple[str, ...] | None = None  # the admin's narrowing; None: not narrowed
    guardrails: tuple[str, ...] = ()  # the `[[guardrails]]` the org chose (besides those that apply to all)

    @property
    def models(self) -> tuple[str, ...] | None:
        """What the org's keys may use: the operator's list narrowed by the admin's."""
        return effective_models(self.allowed_models, self.admin_models)


def effective_models(operator: tuple[str, ...] | None, admin: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """An org's allow-list: the operator's, narrowed by what its admin set (names in both)."""
    if admin is None:
        return operator
    if operator is None:
        return admin
    return tuple(name for name in admin if name in operator)


def encode_allowed(models: tuple[str, ...] | None) -> str:
    """The stored form of an allow-list."""
    return "*" if models is None else orjson.dumps(list(models)).decode()


def decode_allowed(stored: str) -> tuple[str, ...] | None:
    """The allow-list from its stored form."""
    return None if stored == "*" else tuple(orjson.loads(stored))


class OrgRepository:
    """Reads and writes `orgs`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get_by_slug(self, slug: str) -> Org | None:
        """The org with this slug, or None."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(orgs).where(orgs.c.slug == slug))).mappings().first()
        return _org(row) if row else None

    async def get(self, org_id: int) -> Org | None:
        """The org with this id, or None."""
        async with self._engine.connect() as conn:
            return await org_by_id(conn, org_id)

    async def count(self) -> int:
        """How many orgs exist."""
        async with self._engine.connect() as conn:
            return len((await conn.execute(select(orgs.c.id).limit(1))).all())

    async def create(self, slug: str, allowed_models: tuple[str, ...] | None = None,
                     file_attachments: bool = True, web_search: bool = False, budget_usd: float | None = None,
                     budget_period: str = DEFAULT_PERIOD, guardrails: tuple[str, ...] = ()) -> Org:
        """Create an org; the slug must be new."""
        async with self._engine.begin() as conn:
            result = await conn.execute(insert(orgs).values(
                slug=slug, allowed_models=encode_allowed(allowed_models), file_attachments=file_attachments,
                web_search=web_search, created_at=utcnow(), budget_usd=budget_usd, budget_period=budget_period,
                guardrails=encode_guardrails(guardrails)))
            org_id = result.inserted_primary_key[0]
        return Org(org_id, slug, allowed_models, file_attachments, web_search, budget_usd, budget_period,
                   guardrails=guardrails)

    async def get_or_create(self, slug: str) -> Org:
        """The org with this slug, created with defaults when missing."""
        return await self.get_by_slug(slug) or await self.create(slug)


def encode_guardrails(names: tuple[str, ...]) -> str | None:
    """The stored form of an org's chosen guardrails (NULL: none)."""
    return orjson.dumps(list(names)).decode() if names else None


def decode_guardrails(stored: str | None) -> tuple[str, ...]:
    """An org's chosen guardrails from their stored form."""
    return tuple(orjson.loads(stored)) if stored else ()


def models_setting(allowed: tuple[str, ...] | None) -> list[str] | str:
    """An allow-list as the admin routes and the audit log show it: a list, or `"*"` for every model."""
    return "*" if allowed is None else list(allowed)


async def org_by_id(conn: AsyncConnection, org_id: int) -> Org | None:
    """The org with this id, read on `conn`."""
    row = (await conn.execute(select(orgs).where(orgs.c.id == org_id))).mappings().first()
    return _org(row) if row else None


async def update_settings(conn: AsyncConnection, org_id: int, changes: Mapping[str, Any], actor: str) -> Org | None:
    """Change some of an org's `models` (the operator's list: a tuple, None for every model),
    `admin_models` (the admin's narrowing, None: none), `file_attachments`, `web_search`,
    `guardrails` (a tuple of names), `budget_usd` (None: none) and `budget_period` on `conn`, recording `org.update` by `actor` with
    each changed value's before and after (`models` as the keys obey it); None when no such org.
    Keys carry their org's allow-list and budget, so run this through `KeyRepository.propagate`."""
    before = await org_by_id(conn, org_id)
    if before is None:
        return None
    values: dict[str, Any] = {}
    details: dict[str, Any] = {}
    if "models" in changes:
        values["allowed_models"] = encode_allowed(changes["models"])
        details["models"] = {"from": models_setting(before.allowed_models), "to": models_setting(changes["models"])}
    if "admin_models" in changes:
        values["admin_models"] = encode_models(changes["admin_models"])
        after = Org(before.id, before.slug, before.allowed_models, before.file_attachments, before.web_search,
                    admin_models=changes["admin_models"])
        details["models"] = {"from": models_setting(before.models), "to": models_setting(after.models)}
    for flag in ("file_attachments", "web_search"):
        if flag in changes:
            values[flag] = bool(changes[flag])
            details[flag] = {"from": getattr(before, flag), "to": bool(changes[flag])}
    if "guardrails" in changes:
        values["guardrails"] = encode_guardrails(tuple(changes["guardrails"]))
        details["guardrails"] = {"from": list(before.guardrails), "to": list(changes["guardrails"])}
    for name in ("budget_usd", "budget_period"):
        if name in changes:
            values[name] = changes[name]
            details[name] = {"from": getattr(before, name), "to": changes[name]}
    if not values:
        return before
    await conn.execute(update(orgs).where(orgs.c.id == org_id).values(**values))
    await write_entry(conn, org_id, AuditEntry(actor, "org.update", before.slug, details))
    return await org_by_id(conn, org_id)


def _org(row: Any) -> Org:
    m = row  # a RowMapping
    return Org(m["id"], m["slug"], decode_allowed(m["allowed_models"]), bool(m["file_attachments"]),
               bool(m["web_search"]), m["budget_usd"], m["budget_period"] or DEFAULT_PERIOD,
               decode_models(m["admin_models"]), decode_guardrails(m["guardrails"]))

"""Organisations: slug, allowed models, feature flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import orjson
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.audit import AuditEntry, write_entry
from inferd.store.db import utcnow
from inferd.store.tables import orgs


@dataclass(frozen=True)
class Org:
    """An organisation as the service uses it."""

    id: int
    slug: str
    allowed_models: tuple[str, ...] | None  # None: every model
    file_attachments: bool
    web_search: bool


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
                     file_attachments: bool = True, web_search: bool = False) -> Org:
        """Create an org; the slug must be new."""
        async with self._engine.begin() as conn:
            result = await conn.execute(insert(orgs).values(
                slug=slug, allowed_models=encode_allowed(allowed_models), file_attachments=file_attachments,
                web_search=web_search, created_at=utcnow()))
            org_id = result.inserted_primary_key[0]
        return Org(org_id, slug, allowed_models, file_attachments, web_search)

    async def get_or_create(self, slug: str) -> Org:
        """The org with this slug, created with defaults when missing."""
        return await self.get_by_slug(slug) or await self.create(slug)


def models_setting(allowed: tuple[str, ...] | None) -> list[str] | str:
    """An allow-list as the admin routes and the audit log show it: a list, or `"*"` for every model."""
    return "*" if allowed is None else list(allowed)


async def org_by_id(conn: AsyncConnection, org_id: int) -> Org | None:
    """The org with this id, read on `conn`."""
    row = (await conn.execute(select(orgs).where(orgs.c.id == org_id))).mappings().first()
    return _org(row) if row else None


async def update_settings(conn: AsyncConnection, org_id: int, changes: Mapping[str, Any], actor: str) -> Org | None:
    """Change some of an org's `models` (a tuple, None for every model), `file_attachments` and
    `web_search` on `conn`, recording `org.update` by `actor` with each changed value's before and
    after; None when no such org. Keys carry their org's allow-list, so run this through
    `KeyRepository.propagate`."""
    before = await org_by_id(conn, org_id)
    if before is None:
        return None
    values: dict[str, Any] = {}
    details: dict[str, Any] = {}
    if "models" in changes:
        values["allowed_models"] = encode_allowed(changes["models"])
        details["models"] = {"from": models_setting(before.allowed_models), "to": models_setting(changes["models"])}
    for flag in ("file_attachments", "web_search"):
        if flag in changes:
            values[flag] = bool(changes[flag])
            details[flag] = {"from": getattr(before, flag), "to": bool(changes[flag])}
    if not values:
        return before
    await conn.execute(update(orgs).where(orgs.c.id == org_id).values(**values))
    await write_entry(conn, org_id, AuditEntry(actor, "org.update", before.slug, details))
    return await org_by_id(conn, org_id)


def _org(row: object) -> Org:
    m = row  # a RowMapping
    return Org(m["id"], m["slug"], decode_allowed(m["allowed_models"]), bool(m["file_attachments"]),  # type: ignore[index]
               bool(m["web_search"]))  # type: ignore[index]

"""Organisations: slug, allowed models, feature flags."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

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


def _org(row: object) -> Org:
    m = row  # a RowMapping
    return Org(m["id"], m["slug"], decode_allowed(m["allowed_models"]), bool(m["file_attachments"]),  # type: ignore[index]
               bool(m["web_search"]))  # type: ignore[index]

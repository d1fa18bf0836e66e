"""End users of an org, found by email or by the identity provider's subject."""

from __future__ import annotations

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.store.db import utcnow
from inferd.store.tables import users


class UserRepository:
    """Reads and writes `users`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get_or_create_by_email(self, org_id: int, email: str) -> int:
        """The id of the org's user with this email, created when missing."""
        async with self._engine.begin() as conn:
            found = (await conn.execute(select(users.c.id).where(
                users.c.org_id == org_id, users.c.email == email))).scalar()
            if found is not None:
                return int(found)
            result = await conn.execute(insert(users).values(org_id=org_id, email=email, created_at=utcnow()))
            return int(result.inserted_primary_key[0])

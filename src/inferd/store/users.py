"""End users of an org, found by email or by the identity provider's subject."""

from __future__ import annotations

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.store.db import utcnow
from inferd.store.tables import users


class UserRepository:
    """Reads and writes `users`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get_or_create_by_email(self, org_id: int, email: str) -> int:
        """The id of the org's user with this email, created when missing."""
        return (await self.email_user(org_id, email))[0]

    async def email_user(self, org_id: int, email: str) -> tuple[int, bool]:
        """The id of the org's user with this email (created when missing) and whether an idp subject
        owns it: a key bound to such a user would act as them."""
        async with self._engine.begin() as conn:
            found = (await conn.execute(select(users.c.id, users.c.subject).where(
                users.c.org_id == org_id, users.c.email == email))).first()
            if found is not None:
                return int(found[0]), found[1] is not None
            result = await conn.execute(insert(users).values(org_id=org_id, email=email, created_at=utcnow()))
            return int(result.inserted_primary_key[0]), False

    async def email_of(self, user_id: int) -> str | None:
        """The user's email (None when unknown or never verified)."""
        async with self._engine.connect() as conn:
            return (await conn.execute(select(users.c.email).where(users.c.id == user_id))).scalar()

    async def resolve_subject(self, org_id: int, subject: str, email: str | None, given_name: str | None,
                              family_name: str | None, email_verified: bool = False) -> int:
        """The org's user with this idp subject, created (or claimed by a verified email) when missing;
        names refreshed."""
        verified_email = email if email_verified else None
        for _attempt in range(3):  # two first logins of one user can race on the unique constraints
            try:
                return await self._resolve_subject(org_id, subject, verified_email, given_name, family_name)
            except IntegrityError:
                continue
        return await self._resolve_subject(org_id, subject, verified_email, given_name, family_name)

    async def _resolve_subject(self, org_id: int, subject: str, verified_email: str | None,
                               given_name: str | None, family_name: str | None) -> int:
        # Only a verified email is ever read or stored. Anyone can put any
        # address in an unverified claim: matching on it would hand them the conversations, keys and
        # invitations of the user known by that email, and storing it would collect that address's
        # future invitations and `keys create --user` keys. Such a subject gets a user of its own.
        async with self._engine.begin() as conn:
            names = {"given_name": given_name, "family_name": family_name}
            found = (await conn.execute(select(users.c.id, users.c.email).where(
                users.c.org_id == org_id, users.c.subject == subject))).first()
            by_email = None
            if verified_email is not None:
                by_email = (await conn.execute(select(users.c.id, users.c.subject).where(
                    users.c.org_id == org_id, users.c.email == verified_email))).first()
            if found is not None:
                if found[1] is None and verified_email is not None and by_email is None:
                    # First seen unverified, verified now: later invitations to this address reach it.
                    names["email"] = verified_email
                await conn.execute(update(users).where(users.c.id == found[0]).values(**names))
                return int(found[0])
            if by_email is not None and by_email[1] is None:
                # A user first known by email (a key made with --user, an invitation) is claimed by
                # the first subject that proves that email; another subject's email is not reused.
                await conn.execute(update(users).where(users.c.id == by_email[0]).values(subject=subject, **names))
                return int(by_email[0])
            email = verified_email if by_email is None else None
            result = await conn.execute(insert(users).values(org_id=org_id, subject=subject, email=email,
                                                             created_at=utcnow(), **names))
            return int(result.inserted_primary_key[0])

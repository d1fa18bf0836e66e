"""Teams of an org: a budget with its period, rpm and tpm windows and an
allow-list of their own, shared by the keys that belong to the team.

Every change is written with its audit entry (`team.create`, `team.update`, `team.delete`) in one
transaction. A key's lookup carries its team's limits, so changes and deletions go through
`KeyRepository.propagate`: the next request on any replica obeys them. A team that keys still
belong to is not deleted (409 `team_in_use`): their limits would silently vanish.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.errors import Conflict
from inferd.store.audit import AuditEntry, write_entry
from inferd.store.db import utcnow
from inferd.store.key_limits import (DEFAULT_PERIOD, decode_model_limits, decode_models, encode_model_limits,
                                     encode_models)
from inferd.store.keys import KeyRepository
from inferd.store.tables import api_keys, spend, teams

TEAM_SETTINGS = ("budget_usd", "budget_period", "rpm", "tpm", "models", "model_limits")  # what create and update set


@dataclass(frozen=True)
class Team:
    """A team as the admin routes and the command line show it."""

    id: int
    org_id: int
    name: str
    budget_usd: float | None
    budget_period: str
    rpm: int | None
    tpm: int | None
    models: tuple[str, ...] | None  # None: what the org allows
    model_limits: dict[str, dict[str, Any]] | None
    created_at: datetime


def _team(row: Any) -> Team:
    return Team(row["id"], row["org_id"], row["name"], row["budget_usd"], row["budget_period"] or DEFAULT_PERIOD,
                row["rpm"], row["tpm"], decode_models(row["models"]), decode_model_limits(row["model_limits"]) or None,
                row["created_at"])


def _stored(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Column values of the settings given (`models` a tuple or None)."""
    values = {name: settings[name] for name in TEAM_SETTINGS if name in settings}
    if "models" in values:
        values["models"] = encode_models(values["models"])
    if "model_limits" in values:
        values["model_limits"] = encode_model_limits(values["model_limits"])
    return values


def _shown(name: str, value: Any) -> Any:
    """A setting as the audit log shows it."""
    return list(value) if name == "models" and value is not None else value


class TeamRepository:
    """Reads and writes `teams`; `keys` is the server's key store, whose `propagate` drops every
    replica's key cache."""

    def __init__(self, engine: AsyncEngine, keys: KeyRepository) -> None:
        self._engine = engine
        self._keys = keys

    async def get(self, org_id: int, name: str) -> Team | None:
        """The org's team of this name, or None."""
        async with self._engine.connect() as conn:
            return await _get(conn, org_id, name)

    async def list(self, org_id: int) -> list[Team]:
        """The org's teams, by name."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(select(teams).where(teams.c.org_id == org_id)
                                       .order_by(teams.c.name))).mappings().all()
        return [_team(row) for row in rows]

    async def spend(self, listed: list[Team], since: Callable[[str], str | None]) -> dict[int, float]:
        """Each team's spend (USD) since `since(its budget period)` (YYYY-MM-DD; None: ever)."""
        if not listed:
            return {}
        firsts = {str(team.id): since(team.budget_period) or "" for team in listed}
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(spend.c.owner, spend.c.day, spend.c.spend_usd).where(
                spend.c.scope == "team", spend.c.owner.in_(list(firsts)), spend.c.day >= min(firsts.values())))
            spent: dict[int, float] = {}
            for owner, day, usd in rows:
                if day >= firsts[owner]:
                    spent[int(owner)] = spent.get(int(owner), 0.0) + usd
        return spent

    async def create(self, org_id: int, name: str, settings: Mapping[str, Any], actor: str) -> Team:
        """A new team with `settings` (of TEAM_SETTINGS), recorded as `team.create` by `actor`;
        Conflict (409 `team_exists`) when the org already has a team of this name."""
        try:
            async with self._engine.begin() as conn:
                if await _get(conn, org_id, name) is not None:
                    raise _exists(name)
                values = _stored(settings)
                await conn.execute(insert(teams).values(org_id=org_id, name=name, created_at=utcnow(), **values))
                details = {key: _shown(key, settings[key]) for key in TEAM_SETTINGS if key in settings}
                await write_entry(conn, org_id, AuditEntry(actor, "team.create", name, details))
                created = await _get(conn, org_id, name)
        except IntegrityError:  # created by another request between the check and the insert
            raise _exists(name) from None
        assert created is not None  # written just above, in this transaction
        return created

    async def update(self, org_id: int, name: str, changes: Mapping[str, Any], actor: str) -> Team | None:
        """Change some of a team's settings (None removes a limit), recording `team.update` by `actor`
        with each changed value's before and after; None when the org has no such team."""

        async def write(conn: AsyncConnection) -> Team | None:
            before = await _get(conn, org_id, name)
            if before is None:
                return None
            values = _stored(changes)
            if not values:
                return before
            await conn.execute(update(teams).where(teams.c.id == before.id).values(**values))
            details = {key: {"from": _shown(key, getattr(before, key)), "to": _shown(key, changes[key])}
                       for key in TEAM_SETTINGS if key in changes}
            await write_entry(conn, org_id, AuditEntry(actor, "team.update", name, details))
            return await _get(conn, org_id, name)

        return await self._keys.propagate(write, f"team:{name}")

    async def delete(self, org_id: int, name: str, actor: str) -> Team | None:
        """Delete a team that no live key belongs to, recording `team.delete` by `actor`; None when the
        org has no such team, Conflict (409 `team_in_use`) while a live key belongs to it."""

        async def write(conn: AsyncConnection) -> Team | None:
            team = await _get(conn, org_id, name)
            if team is None:
                return None
            members = (await conn.execute(select(func.count()).select_from(api_keys).where(
                api_keys.c.team_id == team.id, api_keys.c.revoked_at.is_(None)))).scalar_one()
            if members:
                raise Conflict(f"Team '{name}' still has {members} live key(s): move or revoke them first",
                               code="team_in_use")
            # Revoked keys let go of it, so a later team that reuses the id never shows them.
            await conn.execute(update(api_keys).where(api_keys.c.team_id == team.id).values(team_id=None))
            await conn.execute(teams.delete().where(teams.c.id == team.id))
            await write_entry(conn, org_id, AuditEntry(actor, "team.delete", name))
            return team

        return await self._keys.propagate(write, f"team:{name}")


async def _get(conn: AsyncConnection, org_id: int, name: str) -> Team | None:
    row = (await conn.execute(select(teams).where(teams.c.org_id == org_id, teams.c.name == name))).mappings().first()
    return _team(row) if row else None


def _exists(name: str) -> Conflict:
    return Conflict(f"A team named '{name}' already exists in your organisation", code="team_exists", param="name")

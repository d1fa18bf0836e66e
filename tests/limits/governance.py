"""Setting teams, key and org governance columns straight in the database, for the tests of what
the corridor enforces (the CLI and admin API that set them are tested on their own). Set before
a server first sees the key: a lookup is cached until the next change it hears of."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from sqlalchemy import insert, select, update

from inferd.store.db import utcnow
from inferd.store.tables import api_keys, orgs, teams
from tests.harness import Server, on_database


def new_org() -> str:
    """A fresh org slug."""
    return f"gov-{uuid.uuid4().hex[:10]}"


def _stored(columns: dict[str, Any]) -> dict[str, Any]:
    return {name: orjson.dumps(value).decode() if name in ("models", "model_limits", "admin_models")
            and value is not None else value for name, value in columns.items()}


def make_team(server: Server, org: str, **columns: Any) -> int:
    """A team of `org` (which must exist) with these columns; its id."""

    async def work(engine: Any) -> int:
        async with engine.begin() as conn:
            org_id = (await conn.execute(select(orgs.c.id).where(orgs.c.slug == org))).scalar_one()
            result = await conn.execute(insert(teams).values(org_id=org_id, name=f"team-{uuid.uuid4().hex[:6]}",
                                                             created_at=utcnow(), **_stored(columns)))
            return int(result.inserted_primary_key[0])

    return int(on_database(server.backend, work))


def set_key(server: Server, full_key: str, **columns: Any) -> None:
    """Change a key's columns (team_id, tpm, rpm, budget_usd, budget_period, models, ...)."""

    async def work(engine: Any) -> None:
        async with engine.begin() as conn:
            await conn.execute(update(api_keys).where(api_keys.c.access_key_id == full_key.split(":")[0])
                               .values(**_stored(columns)))

    on_database(server.backend, work)


def set_org(server: Server, org: str, **columns: Any) -> None:
    """Change an org's columns (budget_usd, budget_period, admin_models, ...)."""

    async def work(engine: Any) -> None:
        async with engine.begin() as conn:
            await conn.execute(update(orgs).where(orgs.c.slug == org).values(**_stored(columns)))

    on_database(server.backend, work)

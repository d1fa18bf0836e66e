"""The queue of budget alerts (table `alerts`, migration 0013) and the spend the sweep reads.

Detection and delivery run on every replica (services/alerts.py), so everything here is safe to
race: a crossing is queued with INSERT ... ON CONFLICT DO NOTHING on its unique key (one row
whoever inserts first), and a row is delivered by whoever claims it with a conditional UPDATE
(one claim wins; the loser's UPDATE matches nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from sqlalchemy import String, and_, case, cast, func, literal, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from inferd.store.key_limits import DEFAULT_PERIOD
from inferd.store.tables import alerts, api_keys, orgs, spend, teams

LOWEST_THRESHOLD = 0.5  # owners spent below this share of their budget have nothing to report
# Spend is a float sum of many costs: a budget spent to exactly 80% may sum to 79.99999...%.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class BudgetSpend:
    """One budget and what its owner spent in the period under way."""

    scope: str  # key | team | org
    owner: str  # as `spend` names it: the access key id, the team id, the org slug
    org: str
    team: str | None  # the team's name (a key's team, or the team itself)
    access_key_id: str | None  # the key, for a key's budget
    budget_usd: float
    period: str  # day | week | month | total
    spend_usd: float


@dataclass(frozen=True)
class QueuedAlert:
    """A row due for delivery."""

    id: str
    payload: str
    created_at: datetime
    attempts: int  # deliveries tried before this one


def reached(spend_usd: float, budget_usd: float, share: float) -> bool:
    """Whether `spend_usd` is at least `share` of the budget (float sums forgiven)."""
    return spend_usd >= budget_usd * share * (1 - TOLERANCE)


def _since(period: ColumnElement[Any], starts: Mapping[str, str]) -> ColumnElement[Any]:
    """The first day counted for a row whose budget has `period` (NULL: the default), given the
    first day of each period under way ('' for total: every day counts)."""
    return case(*((func.coalesce(period, DEFAULT_PERIOD) == name, literal(day)) for name, day in starts.items()),
                else_=literal(starts[DEFAULT_PERIOD]))


class AlertRepository:
    """Reads of spent budgets, and the queue's writes."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert

    async def spent_budgets(self, starts: Mapping[str, str], now: datetime) -> list[BudgetSpend]:
        """Every live budget (of a key, a team, an org) spent to at least half in its period under
        way; `starts` maps each period to its first day (YYYY-MM-DD, '' for total). One grouped
        query per scope, each an index range of `spend` per budgeted owner."""
        total = func.sum(spend.c.spend_usd).label("spent")
        key_since = _since(api_keys.c.budget_period, starts)
        keys_query = (
            select(api_keys.c.access_key_id, api_keys.c.budget_usd, api_keys.c.budget_period, orgs.c.slug,
                   teams.c.name, total)
            .select_from(api_keys.join(orgs, orgs.c.id == api_keys.c.org_id)
                         .outerjoin(teams, teams.c.id == api_keys.c.team_id)
                         .join(spend, and_(spend.c.scope == "key", spend.c.owner == api_keys.c.access_key_id,
                                           spend.c.day >= key_since)))
            .where(api_keys.c.budget_usd > 0, api_keys.c.revoked_at.is_(None),
                   or_(api_keys.c.expires_at.is_(None), api_keys.c.expires_at > now))
            .group_by(api_keys.c.access_key_id, api_keys.c.budget_usd, api_keys.c.budget_period, orgs.c.slug,
                      teams.c.name)
            .having(total >= api_keys.c.budget_usd * LOWEST_THRESHOLD * (1 - TOLERANCE)))
        team_owner = cast(teams.c.id, String)
        teams_query = (
            select(team_owner.label("owner"), teams.c.budget_usd, teams.c.budget_period, orgs.c.slug, teams.c.name,
                   total)
            .select_from(teams.join(orgs, orgs.c.id == teams.c.org_id)
                         .join(spend, and_(spend.c.scope == "team", spend.c.owner == team_owner,
                                           spend.c.day >= _since(teams.c.budget_period, starts))))
            .where(teams.c.budget_usd > 0)
            .group_by(teams.c.id, teams.c.budget_usd, teams.c.budget_period, orgs.c.slug, teams.c.name)
            .having(total >= teams.c.budget_usd * LOWEST_THRESHOLD * (1 - TOLERANCE)))
        orgs_query = (
            select(orgs.c.slug, orgs.c.budget_usd, orgs.c.budget_period, total)
            .select_from(orgs.join(spend, and_(spend.c.scope == "org", spend.c.owner == orgs.c.slug,
                                               spend.c.day >= _since(orgs.c.budget_period, starts))))
            .where(orgs.c.budget_usd > 0)
            .group_by(orgs.c.slug, orgs.c.budget_usd, orgs.c.budget_period)
            .having(total >= orgs.c.budget_usd * LOWEST_THRESHOLD * (1 - TOLERANCE)))
        found: list[BudgetSpend] = []
        async with self._engine.connect() as conn:
            for key_id, budget, period, org, team, spent in await conn.execute(keys_query):
                found.append(BudgetSpend("key", key_id, org, team, key_id, float(budget), period or DEFAULT_PERIOD,
                                         float(spent)))
            for owner, budget, period, org, team, spent in await conn.execute(teams_query):
                found.append(BudgetSpend("team", owner, org, team, None, float(budget), period or DEFAULT_PERIOD,
                                         float(spent)))
            for org, budget, period, spent in await conn.execute(orgs_query):
                found.append(BudgetSpend("org", org, org, None, None, float(budget), period or DEFAULT_PERIOD,
                                         float(spent)))
        return found

    async def enqueue(self, alert_id: str, scope: str, owner: str, period_start: str, threshold: int, payload: str,
                      now: datetime) -> bool:
        """Queue one crossing, due now; False when it is queued already (by this or another replica)."""
        statement = self._insert(alerts).values(
            id=alert_id, scope=scope, owner=owner, period_start=period_start, threshold=threshold, payload=payload,
            created_at=now, attempts=0, next_attempt_at=now).on_conflict_do_nothing()
        async with self._engine.begin() as conn:
            return (await conn.execute(statement)).rowcount == 1

    async def due(self, now: datetime, limit: int) -> list[QueuedAlert]:
        """Rows whose delivery is due and that no replica holds, oldest due first."""
        query = (select(alerts.c.id, alerts.c.payload, alerts.c.created_at, alerts.c.attempts)
                 .where(alerts.c.next_attempt_at <= now,
                        or_(alerts.c.claimed_until.is_(None), alerts.c.claimed_until < now))
                 .order_by(alerts.c.next_attempt_at).limit(limit))
        async with self._engine.connect() as conn:
            return [QueuedAlert(*row) for row in await conn.execute(query)]

    async def claim(self, alert_id: str, now: datetime, hold_s: float) -> bool:
        """Hold a due row for `hold_s` seconds and count the attempt; False when another replica
        claimed it (or delivered it) first. Under concurrent claims PostgreSQL re-checks the
        condition on the row the winner updated, SQLite runs one writer at a time: one wins."""
        statement = (update(alerts)
                     .where(alerts.c.id == alert_id, alerts.c.next_attempt_at <= now,
                            or_(alerts.c.claimed_until.is_(None), alerts.c.claimed_until < now))
                     .values(claimed_until=now + timedelta(seconds=hold_s), attempts=alerts.c.attempts + 1))
        async with self._engine.begin() as conn:
            return (await conn.execute(statement)).rowcount == 1

    async def delivered(self, alert_id: str, now: datetime) -> None:
        """The receiver took it: never sent again (the row stays, for an operator to look at)."""
        await self._set(alert_id, delivered_at=now, next_attempt_at=None, claimed_until=None, last_error=None)

    async def retry_at(self, alert_id: str, when: datetime, error: str) -> None:
        """Delivery failed: try again at `when`."""
        await self._set(alert_id, next_attempt_at=when, claimed_until=None, last_error=error[:500])

    async def give_up(self, alert_id: str, now: datetime, error: str) -> None:
        """Retried for as long as allowed: failed for good."""
        await self._set(alert_id, failed_at=now, next_attempt_at=None, claimed_until=None, last_error=error[:500])

    async def _set(self, alert_id: str, **values: Any) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(update(alerts).where(alerts.c.id == alert_id).values(**values))

"""Budget alerts: with `[alerts]`, each replica looks at spend every
`check_interval_s` and queues one alert per budget and period for each of 50%, 80% and 100% of it
reached; alert_delivery.py posts them.

Detection is off the request path: a call only adds to `spend` (as every usage commit does),
and the sweep reads, for every live budget, its owner's spend since its period began (three
grouped queries). A crossing is queued under a unique key (scope, owner, period start,
threshold), so however many replicas see it, and however often, one alert comes of it; a call
that takes spend from 40% to 120% at once crosses 50, 80 and 100 and queues all three. The body
holds the spend seen when the crossing was queued.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.config_alerts import AlertsConfig
from inferd.limits.periods import since
from inferd.observe.metrics import Metrics
from inferd.services.alert_delivery import AlertSender
from inferd.services.purge import stop_job
from inferd.store.alerts import AlertRepository, BudgetSpend, reached
from inferd.store.db import iso, utcnow
from inferd.store.key_limits import PERIODS

log = logging.getLogger("inferd.alerts")

THRESHOLDS = (50, 80, 100)  # percent of a budget
# Crossings this replica knows are queued, so a budget past a threshold is not re-inserted every
# pass (each a write) for the rest of its period; forgotten wholesale past this many.
MAX_REMEMBERED = 100_000


def alert_body(alert_id: str, spent: BudgetSpend, threshold: int, period_start: str | None, created_at: str) -> str:
    """The JSON body of one alert, as posted (and stored, so every attempt sends the same bytes)."""
    return orjson.dumps({
        "id": alert_id, "type": "budget.threshold", "scope": spent.scope, "org": spent.org, "team": spent.team,
        "access_key_id": spent.access_key_id, "threshold": threshold / 100, "spend_usd": spent.spend_usd,
        "budget_usd": spent.budget_usd, "period": spent.period, "period_start": period_start,
        "created_at": created_at,
    }).decode()


class BudgetSweep:
    """Queues the crossings of budget thresholds, every `interval_s`, until closed."""

    def __init__(self, repo: AlertRepository, interval_s: float, sender: AlertSender | None = None) -> None:
        self._repo = repo
        self._interval = interval_s
        self._sender = sender  # woken when rows are queued, to send them at once
        self._known: set[tuple[str, str, str, int]] = set()
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> int:
        """Queue what has been crossed and is not queued yet; how many rows this pass inserted."""
        starts = {period: since(period) or "" for period in PERIODS}
        now = utcnow()
        inserted = 0
        for spent in await self._repo.spent_budgets(starts, now):
            start = starts[spent.period]
            for threshold in THRESHOLDS:
                if not reached(spent.spend_usd, spent.budget_usd, threshold / 100):
                    break
                crossing = (spent.scope, spent.owner, start, threshold)
                if crossing in self._known:
                    continue
                alert_id = "alert_" + uuid.uuid4().hex
                body = alert_body(alert_id, spent, threshold, start or None, iso(now))
                if await self._repo.enqueue(alert_id, spent.scope, spent.owner, start, threshold, body, now):
                    inserted += 1
                    log.info("budget alert %s queued: %s %s at %d%% of its %s budget", alert_id, spent.scope,
                             spent.access_key_id or spent.team or spent.org, threshold, spent.period)
                if len(self._known) >= MAX_REMEMBERED:
                    self._known.clear()
                self._known.add(crossing)
        if inserted and self._sender is not None:
            self._sender.wake()
        return inserted

    def start(self) -> None:
        """Start sweeping, on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="budget alert sweep")

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # a failed pass (a database restarting) must not end the sweep
                log.exception("looking for budget alerts failed; retrying in %.1f s", self._interval)
            await asyncio.sleep(self._interval)

    async def close(self) -> None:
        """Stop the task."""
        await stop_job(self._task)
        self._task = None


class BudgetAlerts:
    """The sweep and the sender of one replica, started and stopped together."""

    def __init__(self, engine: AsyncEngine, config: AlertsConfig, metrics: Metrics | None = None) -> None:
        repo = AlertRepository(engine)
        self.sender = AlertSender(repo, config, metrics.alert if metrics is not None else None)
        self.sweep = BudgetSweep(repo, config.check_interval_s, self.sender)

    def start(self) -> None:
        """Start both tasks on the running loop."""
        self.sender.start()
        self.sweep.start()

    async def close(self) -> None:
        """Stop both; queued rows wait in the database for the next start of any replica."""
        await self.sweep.close()
        await self.sender.close()


def start_alerts(engine: AsyncEngine, config: AlertsConfig | None, metrics: Metrics | None = None
                 ) -> BudgetAlerts | None:
    """Start budget alerts when `[alerts]` is configured; None (nothing runs) otherwise."""
    if config is None:
        return None
    alerts = BudgetAlerts(engine, config, metrics)
    alerts.start()
    return alerts

"""Delivery of queued budget alerts to `[alerts] webhook_url`.

Every replica runs a sender. Each claims due rows one by one (store/alerts.py `claim`: one
replica wins a row), POSTs the stored body signed with `x-inferd-signature: sha256=<hex
HMAC-SHA256(secret, body)>` and records the outcome: a 2xx delivers it; anything else (another
status, a refused connection, a timeout) schedules a retry after 1, 2, 4 ... `retry_base_s`
seconds (at most `retry_max_s`, 5 minutes by default, apart) until `retry_for_s` after the alert was queued, then gives up
with a warning. The rows are the queue, so a restart loses none: whichever replica runs next
takes them up. A replica that dies mid-delivery holds its row CLAIM_S seconds; another then
sends it again, so a receiver may, rarely, see an alert twice: it dedupes on the body's `id`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from datetime import timedelta
from typing import Callable

import httpx

from inferd.config_alerts import AlertsConfig
from inferd.store.alerts import AlertRepository, QueuedAlert
from inferd.store.db import utcnow

log = logging.getLogger("inferd.alerts")

POST_TIMEOUT_S = 10.0
CLAIM_S = 30.0  # longer than a POST may take: a claim outlives its delivery
BATCH = 20  # rows claimed per pass; a full pass is followed by another at once

# Counts an outcome (`delivered`, `retried`, `failed`), e.g. into inferd_alerts_total.
Outcome = Callable[[str], None]


def signature(secret: str, body: bytes) -> str:
    """The `x-inferd-signature` header's value for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class AlertSender:
    """Delivers due alerts in the background until closed."""

    def __init__(self, repo: AlertRepository, config: AlertsConfig, outcome: Outcome | None = None) -> None:
        self._repo = repo
        self._config = config
        self._outcome = outcome or (lambda _: None)
        # Retries come due every retry_base_s at the soonest; new rows wake the loop at once.
        self._poll_s = max(0.05, min(1.0, config.check_interval_s, config.retry_base_s))
        self._wake = asyncio.Event()
        self._client: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """Start delivering, on the running loop."""
        self._client = httpx.AsyncClient(timeout=POST_TIMEOUT_S)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="alert sender")

    def wake(self) -> None:
        """Look for due rows now (the sweep queued some)."""
        self._wake.set()

    async def run_once(self) -> int:
        """Deliver (or fail once more) what is due now; how many rows this replica claimed."""
        now = utcnow()
        claimed = [row for row in await self._repo.due(now, BATCH) if await self._repo.claim(row.id, now, CLAIM_S)]
        for result in await asyncio.gather(*(self._deliver(row) for row in claimed), return_exceptions=True):
            if isinstance(result, Exception):  # its claim lapses and the row is tried again
                log.error("recording a budget alert's delivery failed: %s", result)
        return len(claimed)

    async def _deliver(self, row: QueuedAlert) -> None:
        assert self._client is not None
        body = row.payload.encode()
        headers = {"content-type": "application/json",
                   "x-inferd-signature": signature(self._config.secret, body)}
        try:
            response = await self._client.post(self._config.webhook_url, content=body, headers=headers)
            if 200 <= response.status_code < 300:
                await self._repo.delivered(row.id, utcnow())
                self._outcome("delivered")
                return
            error = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:  # never the URL or the secret: only what went wrong
            error = f"{type(exc).__name__}: {exc}"
        now = utcnow()
        deadline = row.created_at + timedelta(seconds=self._config.retry_for_s)
        attempts = row.attempts + 1
        if now >= deadline:
            await self._repo.give_up(row.id, now, error)
            self._outcome("failed")
            log.warning("budget alert %s not delivered after %d attempts, giving up: %s", row.id, attempts, error)
            return
        delay = min(self._config.retry_base_s * 2 ** min(row.attempts, 60), self._config.retry_max_s)
        await self._repo.retry_at(row.id, min(now + timedelta(seconds=delay), deadline), error)
        self._outcome("retried")
        log.info("budget alert %s not delivered (%s); retrying in %.1f s", row.id, error, delay)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                if await self.run_once() == BATCH:
                    continue
            except Exception:  # a failed pass (a database restarting) must not end the sender
                log.exception("delivering budget alerts failed; retrying in %.1f s", self._poll_s)
            try:
                await asyncio.wait_for(self._wake.wait(), self._poll_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def close(self) -> None:
        """Stop after the pass under way, whose POSTs end within POST_TIMEOUT_S and are recorded
        (so the next start sends a failed one at once); a pass that outlasts that is cancelled, and
        a delivery cut short keeps its claim CLAIM_S before it is sent again."""
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            try:
                await asyncio.wait_for(self._task, POST_TIMEOUT_S + 2)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

"""The worker loop: claim batches (leases), run them (worker/batch_run.py), finalise them; and the
retention job."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from inferd.auth.key_lookup import KeyLookup
from inferd.config import BatchConfig
from inferd.limits.base import Limits
from inferd.observe.metrics import Metrics
from inferd.services.batches import LEASE_SECONDS, BatchService
from inferd.store.batches import LeaseLost
from inferd.store.db import utcnow
from inferd.worker.batch_run import BatchRun
from inferd.services.chat import ChatService
from inferd.worker.lines import LineRunner

if TYPE_CHECKING:
    from inferd.wiring import Services

log = logging.getLogger("inferd.worker")

MAX_BATCHES = 4  # batches one worker runs at once


def job_interval(config: BatchConfig) -> float:
    """How often background jobs check: min(60, the shortest setting / 5)."""
    return max(0.05, min(60.0, min(config.window_seconds, config.retention_seconds) / 5))


class BatchWorker:
    """Claims and runs batches until stopped; also deletes files past their retention."""

    def __init__(self, service: BatchService, chat: ChatService, limits: Limits, keys: KeyLookup,
                 config: BatchConfig, metrics: Metrics) -> None:
        self.service = service
        self.metrics = metrics
        self.limits = limits
        self.keys = keys
        self.config = config
        self.lines = LineRunner(chat, limits, config)
        self.owner = f"worker-{uuid.uuid4().hex[:16]}"
        self.interval = job_interval(config)
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run on the current event loop."""
        self._task = asyncio.get_running_loop().create_task(self.run_forever(), name="batch-worker")

    async def _run_one(self, row: dict[str, Any]) -> None:
        run = BatchRun(self, row)
        heartbeat = asyncio.create_task(run.heartbeat())
        try:
            await run.run()
        except LeaseLost:
            log.warning("lost the lease of %s; another worker carries on", row["id"])
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch %s failed in the worker; it will be retried", row["id"])
            await asyncio.sleep(1)
            await self.service.repo.release(row["id"], self.owner)
        finally:
            heartbeat.cancel()
            self._runs.pop(row["id"], None)

    async def _claim(self, due_only: bool = False) -> bool:
        row = await self.service.repo.claim(self.owner, LEASE_SECONDS, skip=self._runs, due_only=due_only)
        if row is None:
            return False
        self._runs[row["id"]] = asyncio.create_task(self._run_one(row), name=f"batch-{row['id']}")
        return True

    async def cleanup(self) -> int:
        """Delete files past their retention."""
        return await self.service.files.delete_expired(utcnow())

    async def run_forever(self) -> None:
        """Claim while there is room, check retention every interval, forever."""
        next_cleanup = 0.0
        while True:
            try:
                if time.monotonic() >= next_cleanup:
                    next_cleanup = time.monotonic() + self.interval
                    await self.cleanup()
                while len(self._runs) < MAX_BATCHES:
                    if not await self._claim():
                        break
                # Expiry and a revoked key do not wait for room: such a batch starts no line, it
                # only needs its files written (within the job cadence).
                while await self._claim(due_only=True):
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("batch worker loop: %s", exc)
            await asyncio.sleep(min(1.0, self.interval))

    async def stop(self) -> None:
        """Stop claiming, stop running batches and hand their leases back."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        runs = list(self._runs.items())
        for _, task in runs:
            task.cancel()
        await asyncio.gather(*(task for _, task in runs), return_exceptions=True)
        for batch_id, _ in runs:
            try:
                await self.service.repo.release(batch_id, self.owner)
            except Exception as exc:
                log.warning("could not release %s: %s", batch_id, exc)


def worker_for(services: "Services") -> BatchWorker:
    """A worker over the services an app (or `inferd batch-worker`) built."""
    return BatchWorker(services.batches, services.chat, services.limits, services.key_lookup, services.config.batches,
                       services.metrics)

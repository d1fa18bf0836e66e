"""The worker loop: claim batches (leases), run them, finalise them; and the retention job."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from inferd.catalogue import ModelCatalogue
from inferd.config import BatchConfig
from inferd.limits.base import Limits
from inferd.services.batches import LEASE_SECONDS, BatchService, error_line
from inferd.store.batches import LeaseLost, LineResult
from inferd.store.db import utcnow
from inferd.store.keys import KeyRepository
from inferd.worker.lines import LineRunner
from inferd.worker.validate import validate_file

if TYPE_CHECKING:
    from inferd.app import Services

log = logging.getLogger("inferd.worker")

MAX_BATCHES = 4  # batches one worker runs at once
PAGE = 500  # pending lines read per query
FLUSH_SECONDS = 0.05  # results wait at most this long for the next group commit


def job_interval(config: BatchConfig) -> float:
    """How often background jobs check: min(60, the shortest setting / 5) (CONTRACT.md)."""
    return max(0.05, min(60.0, min(config.window_seconds, config.retention_seconds) / 5))


class _BatchRun:
    """One claimed batch: its lines in flight, its results waiting for a commit, its lease."""

    def __init__(self, worker: "BatchWorker", row: dict[str, Any]) -> None:
        self.worker = worker
        self.row = row
        self.id: str = row["id"]
        self.status: str = row["status"]
        self.lost = False
        self.results: list[LineResult] = []
        self.flushed = asyncio.Event()
        self.in_flight: set[asyncio.Task[None]] = set()

    def expired(self) -> bool:
        return utcnow() >= self.row["expires_at"]

    def may_start(self) -> bool:
        """Whether a line may still start: not cancelled, not expired, lease held."""
        return self.status == "in_progress" and not self.lost and not self.expired()

    async def heartbeat(self) -> None:
        """Renew the lease and pick up a cancel, until the run ends."""
        repo = self.worker.service.repo
        while True:
            await asyncio.sleep(min(LEASE_SECONDS / 4, self.worker.interval))
            try:
                self.status = await repo.renew(self.id, self.worker.owner, LEASE_SECONDS)
            except LeaseLost:
                self.lose()
                return
            except Exception as exc:  # the database may be briefly away; the lease has slack
                log.warning("lease renewal of %s failed: %s", self.id, exc)

    def lose(self) -> None:
        """Another worker took the batch: stop its lines at once. Results not yet recorded are
        dropped (the new holder runs those lines again), so their cost leaves the budget view."""
        self.lost = True
        self.worker.lines.settle(self.results)
        self.results = []
        for task in self.in_flight:
            task.cancel()

    async def flush(self) -> None:
        """Commit every waiting result with its usage row, then update the spend counters."""
        if not self.results or self.lost:
            return
        batch, self.results = self.results, []
        worker = self.worker
        try:
            amounts = await worker.service.repo.record(self.id, worker.owner, LEASE_SECONDS, batch)
        except LeaseLost:
            worker.lines.settle(batch)
            self.lose()
            raise
        except BaseException:
            # Nothing of a failed transaction stayed; recording is idempotent, so put them back.
            self.results[:0] = batch
            raise
        if amounts:
            try:
                await worker.limits.spend.add(amounts)
            except Exception as exc:  # the rows are safe; counters reseed from the database
                log.warning("spend counter update failed: %s", exc)
        worker.lines.settle(batch)

    async def flusher(self) -> None:
        """Group-commit results as they come."""
        while not self.lost:
            await asyncio.sleep(FLUSH_SECONDS)
            try:
                await self.flush()
            except LeaseLost:
                return
            except Exception as exc:
                log.warning("recording lines of %s failed (will retry): %s", self.id, exc)

    async def _line(self, line_no: int, custom_id: str, body: str, key: Any, slots: asyncio.Semaphore) -> None:
        try:
            result = await self.worker.lines.run(line_no, custom_id, body, key, self.may_start)
        except Exception:  # a bug must not leave the line pending forever
            log.exception("line %d of %s failed", line_no, self.id)
            result = LineResult(line_no, "failed", error_line(custom_id, "internal_error", "Internal error", 500),
                                None)
        finally:
            slots.release()
        if result is not None:
            if self.lost:  # never to be recorded by this worker: its cost leaves the budget view
                self.worker.lines.settle([result])
            else:
                self.results.append(result)

    async def run(self) -> None:
        """Validate (first time), run the pending lines, drain, finalise."""
        service, worker = self.worker.service, self.worker
        if not self.row["validated"]:
            if self.status == "cancelling":
                await service.finalise(self.id, worker.owner, "cancelled")
                return
            stored = await service.files.get(self.row["input_file_id"])
            checked = await asyncio.to_thread(validate_file, service.files.absolute(stored)) if stored else None
            if checked is None or checked.errors:
                errors = checked.diagnosis() if checked else {"object": "list", "data": [
                    {"code": "file_not_found", "message": "The input file no longer exists", "line": None,
                     "param": "input_file_id"}]}
                await service.finalise(self.id, worker.owner, "failed", errors)
                return
            await service.repo.store_lines(self.id, worker.owner, LEASE_SECONDS, checked.lines)
        key = await worker.keys.lookup(self.row["key_id"])
        slots = asyncio.Semaphore(max(64, worker.config.max_concurrency * 4))
        flusher = asyncio.create_task(self.flusher())
        try:
            after = -1
            while self.may_start():
                page = await service.repo.pending(self.id, after, PAGE)
                if not page:
                    break
                for line_no, custom_id, body in page:
                    await slots.acquire()
                    if not self.may_start():
                        slots.release()
                        break
                    task = asyncio.create_task(self._line(line_no, custom_id, body, key, slots))
                    self.in_flight.add(task)
                    task.add_done_callback(self.in_flight.discard)
                    after = line_no
            if self.in_flight:  # drain: lines already started finish and are recorded
                await asyncio.gather(*self.in_flight, return_exceptions=True)
        except BaseException:
            for task in self.in_flight:
                task.cancel()
            raise
        finally:
            flusher.cancel()
        if self.lost:
            return
        await self.flush()
        if self.status == "cancelling":
            await service.finalise(self.id, worker.owner, "cancelled")
        elif not await service.repo.pending(self.id, -1, 1):
            await service.finalise(self.id, worker.owner, "completed")
        elif self.expired():
            await service.finalise(self.id, worker.owner, "expired")
        # otherwise lines are left (the lease was lost mid-way): the next claim picks them up


class BatchWorker:
    """Claims and runs batches until stopped; also deletes files past their retention."""

    def __init__(self, service: BatchService, catalogue: ModelCatalogue, limits: Limits, keys: KeyRepository,
                 config: BatchConfig) -> None:
        self.service = service
        self.limits = limits
        self.keys = keys
        self.config = config
        self.lines = LineRunner(catalogue, limits, config)
        self.owner = f"worker-{uuid.uuid4().hex[:16]}"
        self.interval = job_interval(config)
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run on the current event loop."""
        self._task = asyncio.get_running_loop().create_task(self.run_forever(), name="batch-worker")

    async def _run_one(self, row: dict[str, Any]) -> None:
        run = _BatchRun(self, row)
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

    async def _claim(self, expired_only: bool = False) -> bool:
        row = await self.service.repo.claim(self.owner, LEASE_SECONDS, skip=self._runs, expired_only=expired_only)
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
                # Expiry does not wait for room: an expired batch only needs its files written.
                while await self._claim(expired_only=True):
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
    return BatchWorker(services.batches, services.catalogue, services.limits, services.keys, services.config.batches)

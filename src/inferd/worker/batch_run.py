"""One claimed batch: validate it, run its pending lines, group-commit their results, finalise it.

A heartbeat keeps the lease and watches what stops a batch from outside the lines: a cancel
(the status turns `cancelling`), a revoked key (the worker turns it
`cancelling` with the reason `key_revoked`; lines in flight finish) and the end of the window
(lines in flight are aborted, since an engine with no timeout may never answer).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from inferd.auth.key_lookup import KeyLookup
from inferd.auth.key_record import KeyRecord
from inferd.config import BatchConfig
from inferd.limits.base import Limits
from inferd.observe.metrics import Metrics
from inferd.metering.recorder import AfterCommit
from inferd.services.batches import LEASE_SECONDS, BatchService, error_line
from inferd.store.batches import LeaseLost, LineResult
from inferd.store.db import utcnow
from inferd.worker.lines import LineRunner
from inferd.worker.validate import validate_file

log = logging.getLogger("inferd.worker")

PAGE = 500  # pending lines read per query
FLUSH_SECONDS = 0.05  # results wait at most this long for the next group commit
FINAL_FLUSH_TRIES = 5  # the last commit of a run is retried (with backoff) before the run gives up
MIN_TICK = 0.05


class Worker(Protocol):
    """What a run uses of the worker that claimed it (worker/runner.py's BatchWorker)."""

    service: BatchService
    limits: Limits
    keys: KeyLookup
    config: BatchConfig
    metrics: Metrics
    lines: LineRunner
    owner: str
    interval: float


class BatchRun:
    """One claimed batch: its lines in flight, its results waiting for a commit, its lease."""

    def __init__(self, worker: Worker, row: dict[str, Any]) -> None:
        self.worker = worker
        self.row = row
        self.id: str = row["id"]
        self.status: str = row["status"]
        self.lost = False
        self.aborted = False
        self.results: list[LineResult] = []
        self.in_flight: set[asyncio.Task[None]] = set()
        self._after_commit = AfterCommit(worker.limits.spend, worker.metrics)

    def expired(self) -> bool:
        """Whether the completion window has elapsed."""
        return bool(utcnow() >= self.row["expires_at"])

    def may_start(self) -> bool:
        """Whether a line may still start: not cancelled, not expired, lease held."""
        return self.status == "in_progress" and not self.lost and not self.expired()

    def _tick(self) -> float:
        """Seconds to the next heartbeat: a quarter of the lease, at most the job cadence, and no
        later than the expiry (so expiry aborts lines promptly, whatever the cadence)."""
        tick = min(LEASE_SECONDS / 4, self.worker.interval)
        if not self.aborted:
            tick = min(tick, (self.row["expires_at"] - utcnow()).total_seconds())
        return max(MIN_TICK, tick)

    async def heartbeat(self) -> None:
        """Renew the lease, pick up a cancel or a revoked key, abort at expiry; until the run ends."""
        repo = self.worker.service.repo
        while True:
            await asyncio.sleep(self._tick())
            try:
                self.status = await repo.renew(self.id, self.worker.owner, LEASE_SECONDS)
                if self.status == "in_progress" and await repo.key_revoked(self.row["key_id"]):
                    self.status = await repo.stop_for_revoked_key(self.id, self.worker.owner, LEASE_SECONDS)
                    log.info("key %s revoked: batch %s stops", self.row["key_id"], self.id)
            except LeaseLost:
                self.lose()
                return
            except Exception as exc:  # the database may be briefly away; the lease has slack
                log.warning("lease renewal of %s failed: %s", self.id, exc)
            if not self.aborted and self.expired():
                self.abort()

    def abort(self) -> None:
        """The window elapsed: stop the lines in flight (an engine with no timeout may never answer).
        They stay pending, so finalisation lists them in the error file as `batch_expired`."""
        self.aborted = True
        for task in self.in_flight:
            task.cancel()

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
        for result in batch:
            worker.metrics.batch_line(result.state == "succeeded")
        await self._after_commit([result.usage_row for result in batch if result.usage_row is not None], amounts)
        worker.lines.settle(batch)

    async def flusher(self, stop: asyncio.Event) -> None:
        """Group-commit results as they come, until `stop` is set. It is never cancelled mid-commit:
        a commit cut off there could land after the run had read the lines as still pending."""
        while not self.lost:
            await asyncio.sleep(FLUSH_SECONDS)
            if stop.is_set():
                return
            try:
                await self.flush()
            except LeaseLost:
                return
            except Exception as exc:
                log.warning("recording lines of %s failed (will retry): %s", self.id, exc)

    async def _final_flush(self) -> None:
        """Commit what is left; a database hiccup is retried, since a result that is never recorded
        makes its line run again."""
        for attempt in range(FINAL_FLUSH_TRIES):
            try:
                await self.flush()
                return
            except LeaseLost:
                raise
            except Exception as exc:
                if attempt == FINAL_FLUSH_TRIES - 1:
                    raise
                log.warning("recording lines of %s failed (retrying): %s", self.id, exc)
                await asyncio.sleep(0.2 * 2 ** attempt)

    async def _line(self, line_no: int, custom_id: str, body: str, key: KeyRecord | None,
                    slots: asyncio.Semaphore) -> None:
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

    async def _pass(self, key: KeyRecord | None, slots: asyncio.Semaphore) -> None:
        """Start every pending line while lines may start, then wait for those in flight."""
        stop = asyncio.Event()
        flusher = asyncio.create_task(self.flusher(stop))
        try:
            after = -1
            while self.may_start():
                page = await self.worker.service.repo.pending(self.id, after, PAGE)
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
            if self.in_flight:  # drain: lines already started finish (or expiry aborts them)
                await asyncio.gather(*self.in_flight, return_exceptions=True)
        except BaseException:
            for task in self.in_flight:
                task.cancel()
            flusher.cancel()
            raise
        finally:
            stop.set()
            await asyncio.gather(flusher, return_exceptions=True)

    async def _validate(self) -> bool:
        """First claim of a batch: check the input file and store its lines. False when the batch
        was finalised instead (cancelled before it started, or its file rejected)."""
        service, owner = self.worker.service, self.worker.owner
        if self.status == "cancelling":
            await service.finalise(self.id, owner, "cancelled")
            return False
        stored = await service.files.get(self.row["input_file_id"])
        checked = None
        if stored is not None:
            async with service.files.local_copy(stored) as path:  # a spool copy unless in the data dir
                checked = await asyncio.to_thread(validate_file, path)
        if checked is None or checked.errors:
            errors = checked.diagnosis() if checked else {"object": "list", "data": [
                {"code": "file_not_found", "message": "The input file no longer exists", "line": None,
                 "param": "input_file_id"}]}
            await service.finalise(self.id, owner, "failed", errors)
            return False
        await service.repo.store_lines(self.id, owner, LEASE_SECONDS, checked.lines)
        return True

    async def run(self) -> None:
        """Validate (first time), run the pending lines, drain, finalise."""
        service, owner = self.worker.service, self.worker.owner
        # The key is read before the check, so the lines never run on a key already revoked.
        key = await self.worker.keys.lookup(self.row["key_id"])
        if self.status == "in_progress" and (key is None or key.revoked
                                             or await service.repo.key_revoked(self.row["key_id"])):
            self.status = await service.repo.stop_for_revoked_key(self.id, owner, LEASE_SECONDS)
        if not self.row["validated"] and not await self._validate():
            return
        slots = asyncio.Semaphore(max(64, self.worker.config.max_concurrency * 4))
        while True:
            await self._pass(key, slots)
            if self.lost:
                return
            await self._final_flush()
            if self.status == "cancelling":
                await service.finalise(self.id, owner, "cancelled")
                return
            if not await service.repo.pending(self.id, -1, 1):
                await service.finalise(self.id, owner, "completed")
                return
            if self.expired():
                await service.finalise(self.id, owner, "expired")
                return
            # Never expected: lines left pending while the batch may run them. Run them again
            # rather than sit on the lease (which would let the same lines run twice much later).
            log.warning("batch %s: lines left pending after a pass; running them again", self.id)
            await asyncio.sleep(FLUSH_SECONDS)

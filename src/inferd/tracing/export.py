"""Export off the request path: a bounded queue the event loop appends ended spans to, and a
thread that turns them into OpenTelemetry SDK spans and sends them with the SDK's OTLP/HTTP
exporter. The only module that imports `opentelemetry`.

The event loop never waits on the collector: `put` is a length test and an append (a full queue
drops the span and counts it), and the thread does the encoding and the HTTP. A collector that
is down, refuses or never answers costs the thread its export timeout per batch; meanwhile the
queue fills and what does not fit is dropped and counted, as is every span of a batch whose
export failed: `inferd_trace_spans_dropped_total{reason}`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from typing import Callable, Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from inferd import __version__
from inferd.config_tracing import TracingConfig
from inferd.tracing.records import SpanRecord
from inferd.tracing.spans import Tracing

log = logging.getLogger("inferd.tracing")

BATCH = 512  # spans per export request (the SDK's batch processor's default)
DELAY_S = 1.0  # a partial batch waits at most this long
REPORT_S = 0.5  # spans dropped on a full queue reach the counter at least this often while drops go on
_KINDS = {1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
Dropped = Callable[[str, int], None]
DROP_REASONS = ("queue_full", "export_failed", "shutdown")


def _trace_state(header: str | None) -> TraceState | None:
    if not header:
        return None
    try:
        return TraceState.from_header([header])
    except ValueError:
        return None


def readable(record: SpanRecord, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """A recorded span as the SDK's exporters take it."""
    state = _trace_state(record.tracestate)
    context = SpanContext(record.trace_id, record.span_id, is_remote=False, trace_flags=_SAMPLED, trace_state=state)
    parent = None
    if record.parent_id is not None:
        parent = SpanContext(record.trace_id, record.parent_id, is_remote=record.remote_parent, trace_flags=_SAMPLED,
                             trace_state=state)
    status = Status(StatusCode.ERROR, record.error) if record.error is not None else Status(StatusCode.UNSET)
    return ReadableSpan(record.name, context=context, parent=parent, resource=resource, attributes=record.attributes,
                        kind=_KINDS[record.kind], status=status, start_time=record.start_ns, end_time=record.end_ns,
                        instrumentation_scope=scope)


class SpanQueue:
    """Ended spans waiting for export, and the thread that exports them."""

    def __init__(self, exporter: OTLPSpanExporter, resource: Resource, max_size: int, dropped: Dropped,
                 batch: int = BATCH, delay_s: float = DELAY_S) -> None:
        self._exporter = exporter
        self._resource = resource
        self._scope = InstrumentationScope("inferd", __version__)
        self._max = max_size
        self._batch = batch
        self._delay_s = delay_s
        self._dropped = dropped
        self._spans: deque[SpanRecord] = deque()  # append and popleft are atomic: no lock on the hot path
        self._wake = threading.Event()
        self._stopping = False
        # Spans a full queue turned away: counted here by the event loop (a Prometheus counter's
        # inc takes a lock, and a stuck collector has every span dropped) and added to the counter
        # every REPORT_S by the same loop, so no other thread writes these two.
        self._full = 0
        self._full_reported = 0
        self._reported_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="inferd-trace-export", daemon=True)

    def start(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()  # where the remainder of the drops is counted
        except RuntimeError:
            self._loop = None
        self._thread.start()

    def put(self, record: SpanRecord) -> None:
        """Queue an ended span (the event loop's whole cost of exporting it)."""
        spans = self._spans
        if len(spans) < self._max:
            spans.append(record)
            if len(spans) == self._batch:
                self._wake.set()
            return
        self._full += 1
        now = time.monotonic()
        if now - self._reported_at >= REPORT_S:
            self._reported_at = now
            self._report_full()

    def _report_full(self) -> None:
        if self._full != self._full_reported:
            self._dropped("queue_full", self._full - self._full_reported)
            self._full_reported = self._full

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            self._drain()
            if self._full != self._full_reported and self._loop is not None and not self._loop.is_closed():
                # Drops that came after the loop last counted them (the load stopped): counted by
                # the loop, the one writer of those numbers.
                try:
                    self._loop.call_soon_threadsafe(self._report_full)
                except RuntimeError:  # the loop closed meanwhile: close() counts them
                    pass

    def _drain(self) -> None:
        spans = self._spans
        while spans and not self._stopping:
            batch = [spans.popleft() for _ in range(min(self._batch, len(spans)))]
            self._export(batch)

    def _export(self, batch: Sequence[SpanRecord]) -> None:
        try:
            result = self._exporter.export([readable(r, self._resource, self._scope) for r in batch])
        except Exception:  # the exporter reports its own failures; anything else must not end the thread
            log.exception("trace export failed")
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._dropped("export_failed", len(batch))

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the thread: what is queued gets one last try within `timeout_s`, the rest is
        dropped (a shutdown must not wait on a collector that does not answer)."""
        self._stopping = True
        self._wake.set()
        self._report_full()  # the loop has stopped putting: this thread may count the rest
        self._thread.join(timeout_s)
        if self._thread.is_alive():  # still waiting on the collector: what is queued is lost
            lost = len(self._spans)
            self._spans.clear()
            if lost:
                self._dropped("shutdown", lost)
        elif self._spans:
            finisher = threading.Thread(target=self._last_batch, daemon=True)
            finisher.start()
            finisher.join(timeout_s)
        self._exporter.shutdown()

    def _last_batch(self) -> None:
        spans = self._spans
        batch = [spans.popleft() for _ in range(min(self._batch, len(spans)))]
        if batch:
            self._export(batch)
        if spans:
            self._dropped("shutdown", len(spans))
            spans.clear()


def start_tracing(config: TracingConfig, url: str, dropped: Dropped) -> tuple[Tracing, SpanQueue]:
    """The tracer and its started export queue, sending to `url` (the full OTLP/HTTP traces URL)."""
    resource = Resource.create({"service.name": config.service_name, "service.version": __version__,
                                "service.instance.id": f"{os.uname().nodename}-{os.getpid()}"})
    exporter = OTLPSpanExporter(endpoint=url, timeout=config.export_timeout_s)
    queue = SpanQueue(exporter, resource, config.max_queue_size, dropped)
    queue.start()
    return Tracing(config, queue.put), queue

"""The Prometheus series of docs/operations.md (Metrics), kept with `prometheus_client`.

The hot path pays for them once per call: the label children of each series are looked up in a
dict keyed by their label values and created only the first time (`labels()` costs several
microseconds; a dict hit a few tens of nanoseconds), and state the server already keeps (calls
in flight, cooldowns, failures by reason, rows waiting for the usage writer) is copied into the
series when they are read rather than counted twice on every call.

Under `inferd serve --workers N` every worker writes its values to memory-mapped files in
`PROMETHEUS_MULTIPROC_DIR` (set by `serve` before the workers start), and the worker that
answers `GET /metrics` sums the files of all of them. Each worker copies its own pool state into
its files once a second, so the gauges of the other workers may be a second old.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

if TYPE_CHECKING:
    from inferd.catalogue import Model

# The classic text format (0.0.4), which every Prometheus version and scraper reads; the names
# here are plain ASCII, so nothing of the newer 1.0.0 format is needed.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds. Calls range from a cached embedding (milliseconds) to a long generation (minutes).
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
_COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


def multiprocess_dir() -> str | None:
    """The folder the workers share their values through, when running several."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class Metrics:
    """Every series, and the cached label children the hot path updates."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.multiprocess = multiprocess_dir() is not None
        r = self.registry
        self._requests = Counter("inferd_requests_total", "Requests answered, by route template, model and status.",
                                 ("route", "model", "status"), registry=r)
        self._duration = Histogram("inferd_request_duration_seconds", "Time from request to the end of the response.",
                                   ("route", "model"), buckets=_DURATION_BUCKETS, registry=r)
        self._ttft = Histogram("inferd_time_to_first_token_seconds", "Time to a stream's first events from its model.",
                               ("model", "deployment"), buckets=_TTFT_BUCKETS, registry=r)
        self._tokens = Counter("inferd_tokens_total", "Tokens of committed usage rows, by type.",
                               ("model", "type"), registry=r)
        self._cost = Counter("inferd_cost_usd_total", "USD of committed usage rows.", ("model",), registry=r)
        self._in_flight = Gauge("inferd_deployment_in_flight", "Calls under way on a deployment.",
                                ("model", "deployment"), registry=r, multiprocess_mode="livesum")
        self._up = Gauge("inferd_deployment_up", "1 when the deployment is not cooling down after failures.",
                         ("model", "deployment"), registry=r, multiprocess_mode="livemin")
        self._failures = Counter("inferd_deployment_failures_total", "Failed attempts (and health probes) by reason.",
                                 ("model", "deployment", "reason"), registry=r)
        self._fallbacks = Counter("inferd_fallbacks_total", "Calls that moved on to one of the model's fallbacks.",
                                  ("model", "fallback"), registry=r)
        self._rejections = Counter("inferd_rejections_total", "Requests refused before any engine was called.",
                                   ("reason",), registry=r)
        self._pending = Gauge("inferd_usage_rows_pending", "Usage rows durable in the journal, not yet in the tables.",
                              registry=r, multiprocess_mode="livesum")
        self._commit = Histogram("inferd_usage_commit_seconds", "Time of one usage fold or commit (a group of rows).",
                                 buckets=_COMMIT_BUCKETS, registry=r)
        self._batch_lines = Counter("inferd_batch_lines_total", "Batch lines finished, by outcome.",
                                    ("status",), registry=r)
        self._alerts = Counter("inferd_alerts_total", "Budget alert deliveries, by outcome (delivered, retried, "
                               "failed).", ("outcome",), registry=r)
        self._guardrails = Counter("inferd_guardrail_actions_total", "Guardrail actions taken (block, redact, log), "
                                   "by guardrail and direction.", ("guardrail", "direction", "action"), registry=r)
        self._cache_requests = Counter("inferd_cache_requests_total", "Requests the response cache saw, by model and "
                                       "result (hit, miss, bypass).", ("model", "result"), registry=r)
        self._cache_saved = Counter("inferd_cache_saved_usd_total", "USD the response cache's hits did not spend "
                                    "(what the answers first cost).", ("model",), registry=r)
        self._spans_dropped = Counter("inferd_trace_spans_dropped_total", "Trace spans lost before a collector took "
                                      "them, by reason (queue_full, export_failed, shutdown).", ("reason",), registry=r)
        self._request_children: dict[tuple[str, str, int], tuple[object, object]] = {}
        self._dropped_children: dict[str, object] = {}
        self._ttft_children: dict[tuple[str, str], object] = {}
        self._token_children: dict[str, tuple[object, object, object, object]] = {}
        self._rejection_children = {reason: self._rejections.labels(reason)
                                    for reason in ("authentication", "rate_limit", "budget", "overloaded")}
        self._line_children = {status: self._batch_lines.labels(status) for status in ("succeeded", "failed")}
        self._failures_seen: dict[tuple[str, str, str], int] = {}
        self.commit_seconds = self._commit.observe

    # The hot path ----------------------------------------------------------------------------

    def request(self, route: str, model: str, status: int, seconds: float) -> None:
        """One request answered."""
        children = self._request_children.get((route, model, status))
        if children is None:
            children = (self._requests.labels(route, model, str(status)), self._duration.labels(route, model))
            self._request_children[(route, model, status)] = children
        children[0].inc()  # type: ignore[attr-defined]
        children[1].observe(seconds)  # type: ignore[attr-defined]

    def first_token(self, model: str, deployment: str, seconds: float) -> None:
        """A stream's first events arrived from `deployment`."""
        child = self._ttft_children.get((model, deployment))
        if child is None:
            child = self._ttft_children[(model, deployment)] = self._ttft.labels(model, deployment)
        child.observe(seconds)  # type: ignore[attr-defined]

    def usage(self, model: str, prompt: int, completion: int, cached: int, cost_usd: float) -> None:
        """A committed usage row's tokens and cost."""
        children = self._token_children.get(model)
        if children is None:
            children = (self._tokens.labels(model, "prompt"), self._tokens.labels(model, "completion"),
                        self._tokens.labels(model, "cached_prompt"), self._cost.labels(model))
            self._token_children[model] = children
        if prompt:
            children[0].inc(prompt)  # type: ignore[attr-defined]
        if completion:
            children[1].inc(completion)  # type: ignore[attr-defined]
        if cached:
            children[2].inc(cached)  # type: ignore[attr-defined]
        if cost_usd:
            children[3].inc(cost_usd)  # type: ignore[attr-defined]

    def rejected(self, reason: str) -> None:
        """A request refused for `reason` (authentication, rate_limit, budget, overloaded)."""
        self._rejection_children[reason].inc()

    def fallback(self, model: str, fallback: str) -> None:
        """A call moved on from `model` to its fallback."""
        self._fallbacks.labels(model, fallback).inc()

    def batch_line(self, succeeded: bool) -> None:
        """A batch line ended (written to the output file, or to the error file)."""
        self._line_children["succeeded" if succeeded else "failed"].inc()

    def alert(self, outcome: str) -> None:
        """A budget alert's delivery attempt ended: delivered, retried (later) or failed (for good)."""
        self._alerts.labels(outcome).inc()

    def guardrail(self, name: str, direction: str, action: str) -> None:
        """A guardrail acted on a call's input or output (its name and the action; never the text)."""
        self._guardrails.labels(name, direction, action).inc()

    def cache(self, model: str, result: str, saved_usd: float = 0.0) -> None:
        """The response cache answered (`hit`, saving `saved_usd`), missed, or was bypassed."""
        self._cache_requests.labels(model, result).inc()
        if saved_usd:
            self._cache_saved.labels(model).inc(saved_usd)

    def trace_spans_dropped(self, reason: str, count: int) -> None:
        """Spans the exporter lost (called from its thread; prometheus_client counters are thread-safe)."""
        child = self._dropped_children.get(reason)  # a dict hit: a stuck collector drops every span
        if child is None:
            child = self._dropped_children[reason] = self._spans_dropped.labels(reason)
        child.inc(count)  # type: ignore[attr-defined]

    # When read -------------------------------------------------------------------------------

    def copy_state(self, models: Iterable["Model"], pending_rows: int) -> None:
        """Copy the pools' state and the writer's queue into the gauges (before a scrape, and once
        a second in each worker under --workers)."""
        now = time.monotonic()
        for model in models:
            for state in model.pool.states:
                self._in_flight.labels(model.id, state.name).set(state.in_flight)
                self._up.labels(model.id, state.name).set(0 if state.cooldown_until > now else 1)
                for reason, count in state.failures.items():
                    label = (model.id, state.name, reason)
                    new = count - self._failures_seen.get(label, 0)
                    if new > 0:
                        self._failures.labels(*label).inc(new)
                        self._failures_seen[label] = count
                    elif label not in self._failures_seen:
                        self._failures.labels(*label)  # shown at 0 from the start
                        self._failures_seen[label] = 0
        self._pending.set(pending_rows)

    def render(self) -> bytes:
        """The Prometheus text exposition: this process's series, or all workers' summed."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)


def worker_exited(pid: int) -> None:
    """Drop a stopped worker's live gauges from the shared files."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(pid)

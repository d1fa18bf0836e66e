"""The call stage: every engine call of every route and service goes through here.

It takes a resolved model, the capability the call needs and an attempt (what to do with one
deployment's engine), and:
- picks a deployment by the model's routing, waiting in line when every one is full
  (back-pressure: 503 `model_overloaded` after `queue_timeout_s`, no usage row);
- fails over before the first byte on connect errors, first-byte timeouts, 5xx and 429 to the
  model's other deployments, then to its `fallbacks` the key may use; a
  relayed 4xx is final;
- meters the call once: one usage row, for the deployment and model that answered (or were tried
  last), durable (in the usage journal, or committed) before the result is returned, or handed
  back as a value (`record=False`: the batch worker commits it with the line's result);
- with a `pacer` (batch lines), takes only deployments with a free slot of it and holds that slot
  for the attempt, waiting when every untried one is full (calls/pacing.py).

Streams (`open_stream`) fail over the same way up to their first batch of events; after that the
stream is the caller's, which ends it with `StreamLease.finish` (meter and free the slot).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Generic, TypeVar

from inferd.auth.key_record import KeyRecord
from inferd.calls.pacing import Pacer
from inferd.calls.route import PacedRoute, Route
from inferd.catalogue import Deployment, Model, ModelCatalogue
from inferd.engines.base import ChatEngine, Engine
from inferd.errors import EngineError, EngineTimeout, EngineUnavailable, InferdError, ModelOverloaded, RelayedError
from inferd.limits.base import Limits
from inferd.metering.recorder import UsageRecorder
from inferd.metering.usage import Usage, usage_for
from inferd.observe.metrics import Metrics
from inferd.observe.requests import current
from inferd.tracing.context import attempting

if TYPE_CHECKING:
    from inferd.tracing.spans import AttemptSpan, Tracing

log = logging.getLogger("inferd.calls")

E = TypeVar("E", bound=Engine)
T = TypeVar("T")


@dataclass(slots=True)
class Answer(Generic[T]):
    """What an attempt returns: its result and what it used (priced from the catalogue unless
    `cost_usd` says, as images do per generation)."""

    value: T
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None
    guardrail: str | None = None  # the output guardrail that withheld the reply (on its usage row)


def reported_prompt_tokens(reply: dict[str, Any]) -> int:
    """The prompt tokens an engine's reply reports in its `usage` (`prompt_tokens`, else
    `total_tokens`, as embedding and rerank engines answer); 0 when it reports none."""
    usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
    return int(usage.get("prompt_tokens") or usage.get("total_tokens") or 0)


@dataclass(slots=True)
class Metered(Generic[T]):
    """A call's result with its usage, and the model and deployment that answered."""

    value: T
    usage: Usage
    model: Model
    deployment: Deployment


@dataclass(slots=True)
class Billing:
    """Who pays for a call and how: the key, the workspace, the price factor, the metadata tags."""

    key: KeyRecord
    workspace: str
    price_factor: float = 1.0
    metadata: dict[str, str] | None = None


def _failing_over(model: Model, index: int, reason: str, exc: InferdError) -> None:
    """Count the failure against the deployment (its cooldown) and say so in the log."""
    model.pool.failed(index, reason)
    log.warning("deployment %s of model %s failed (%s: %s); trying the next", model.deployments[index].name,
                model.id, reason, exc.message)


def failover_reason(exc: InferdError) -> str | None:
    """Why an attempt's failure lets the call try elsewhere; None when it is final."""
    if isinstance(exc, EngineTimeout):
        return "timeout"
    if isinstance(exc, EngineUnavailable):
        return "connect"
    if isinstance(exc, RelayedError):
        return "status_429" if exc.status == 429 else None
    if isinstance(exc, EngineError):
        return "status_5xx"
    return None


class CallStage:
    """Routes, fails over and meters engine calls."""

    def __init__(self, catalogue: ModelCatalogue, writer: UsageRecorder, metrics: Metrics,
                 limits: Limits | None = None) -> None:
        self._catalogue = catalogue
        self._writer = writer
        self.metrics = metrics
        self._limits = limits  # the per-model windows, and the tokens every tpm window counts
        self._model_tpm = any(m.config.rpm is not None or m.config.tpm is not None for m in catalogue.models)
        self.tracing: Tracing | None = None  # `[tracing]`: a span per attempt; None: off (one test per attempt)

    async def _admit_model(self, key: KeyRecord, model: Model) -> None:
        """The windows of the model asked for (the key's and team's `--model-limit`, the model's own
        `rpm`/`tpm`): checked here, where every metered call of every route passes once it knows
        its model. Fallbacks answer within the same admission."""
        config = model.config
        if self._limits is not None and (key.model_windows or config.rpm is not None or config.tpm is not None):
            await self._limits.admit_model(key, config.id, config.rpm, config.tpm)

    def fallbacks(self, model: Model, key: KeyRecord, capability: type[Engine]) -> list[Model]:
        """The model's fallbacks the key may use now that can serve the same capability, in order."""
        return [m for m in self._catalogue.fallbacks(model, key)
                if all(d.can(capability) for d in m.deployments)]

    async def _first_answer(self, model: Model, capability: type[E], key: KeyRecord, affinity: str | None,
                            attempt: Callable[[E, Deployment, Model], Awaitable[T]], hold: bool = False,
                            pacer: Pacer | None = None, operation: str | None = None) -> tuple[T, Model, int]:
        """The first answer of `attempt` over the route (model, index of the deployment that gave it).
        The slot is released after each attempt, or kept on success when `hold` (a stream keeps
        its slot until it ends; never paced). Raises _Exhausted, or the first final (non-failover)
        failure wrapped the same way."""
        last: _Exhausted | None = None
        route = Route(self, model, key, capability, affinity) if pacer is None else \
            PacedRoute(self, model, key, capability, affinity, pacer)
        while True:
            try:
                slot = await route.next()
            except ModelOverloaded:
                if last is not None:  # it did reach an engine: its failure is the answer (and billed)
                    raise last from None
                raise
            if slot is None:
                break
            answering, index = slot
            deployment = answering.deployments[index]
            span = None if self.tracing is None else self.tracing.attempt(capability, deployment, answering, operation,
                                                                          key)
            try:
                value = await attempt(deployment.serving(capability), deployment, answering)
            except InferdError as exc:
                route.release(answering, index)
                reason = failover_reason(exc)
                if span is not None:
                    span.failed(exc, reason)
                if reason is None:
                    raise _Exhausted(exc, deployment) from None
                _failing_over(answering, index, reason, exc)
                last = _Exhausted(exc, deployment)
                continue
            except BaseException as exc:
                route.release(answering, index)
                if span is not None:
                    span.failed(exc, None)
                raise
            if span is not None:
                span.answered(value, hold)  # a stream's span stays open: its lease ends it
            if not hold:
                route.release(answering, index)
            answering.pool.succeeded(index)
            return value, answering, index
        if last is None:  # nothing was tried: cannot happen for a resolved model with deployments
            raise _Exhausted(EngineUnavailable(f"Model '{model.id}' has no deployment to try"), None)
        raise last

    async def call(self, model: Model, capability: type[E], billing: Billing,
                   attempt: Callable[[E, Deployment, Model], Awaitable[Answer[T]]], *,
                   affinity: str | None = None, record: bool = True, pacer: Pacer | None = None) -> Metered[T]:
        """Run `attempt` on the model's deployments until one answers (failing over as the module
        says); meter the call once. A failure raises the last attempt's error with its usage row
        written (or, with `record=False`, attached as `exc.usage`). With `pacer`, each attempt
        holds a slot of it on its deployment."""
        started = time.perf_counter()
        with self._writer.metered_calls:
            try:
                await self._admit_model(billing.key, model)
                answer, answering, index = await self._first_answer(model, capability, billing.key, affinity, attempt,
                                                                     pacer=pacer)
            except _Exhausted as failed:
                await self._failed(billing, failed.deployment, failed.error, started, record)
                raise failed.error from None
            deployment = answering.deployments[index]
            usage = usage_for(billing.key, deployment.config, billing.workspace, 200, answer.prompt_tokens,
                              answer.completion_tokens, started=started, cached=answer.cached_tokens,
                              metadata=billing.metadata, price_factor=billing.price_factor, cost_usd=answer.cost_usd,
                              guardrail=answer.guardrail)
            _noted(usage)
            await self.tokens_used(billing.key, usage)  # first: its Redis write goes with the spend's
            if record:
                await self._writer.record(usage)
            return Metered(answer.value, usage, answering, deployment)

    async def unmetered(self, model: Model, capability: type[E], key: KeyRecord,
                        attempt: Callable[[E, Deployment, Model], Awaitable[T]], *,
                        affinity: str | None = None) -> T:
        """Run `attempt` with the same routing and failover as `call`, writing no usage row (token
        counts, which cost nothing)."""
        try:
            return (await self._first_answer(model, capability, key, affinity, attempt, operation="count_tokens"))[0]
        except _Exhausted as failed:
            raise failed.error from None

    async def _failed(self, billing: Billing, deployment: Deployment | None, exc: InferdError, started: float,
                      record: bool) -> None:
        if deployment is None:
            return
        usage = usage_for(billing.key, deployment.config, billing.workspace, exc.status, 0, 0, started=started,
                          metadata=billing.metadata, price_factor=billing.price_factor)
        exc.usage = usage
        _noted(usage)
        if record:
            await self._writer.record(usage)

    async def record(self, usage: Usage, key: KeyRecord) -> None:
        """Commit one usage row (a stream's, when it ends), its tokens counted first (one write to
        Redis for both)."""
        await self.tokens_used(key, usage)
        await self._writer.record(usage)

    async def tokens_used(self, key: KeyRecord, usage: Usage) -> None:
        """A call's tokens count in the tokens-per-minute windows of its key, its team and its model."""
        limits = self._limits
        if limits is None:
            return
        config = self._catalogue.config_of(usage.model) if key.model_windows or self._model_tpm else None
        if config is not None:
            await limits.count_tokens(key, usage.prompt_tokens + usage.completion_tokens, config.id, config.rpm,
                                      config.tpm)
        elif key.windows:
            await limits.count_tokens(key, usage.prompt_tokens + usage.completion_tokens)

    def metered_calls_left(self) -> None:
        """A stream that was counted as under way (for the writer's group commit) ended."""
        self._writer.metered_calls.ended()

    async def open_stream(self, model: Model, billing: Billing,
                          open_events: Callable[[ChatEngine, Deployment, Model], AsyncIterator[list[bytes]]], *,
                          affinity: str | None = None) -> "StreamLease":
        """A stream whose first batch of events has arrived, from the first deployment (or fallback)
        that sent one. Failures before that fail over; the last one is metered and raised."""
        started = time.perf_counter()

        async def first_batch(engine: ChatEngine, deployment: Deployment, answering: Model
                              ) -> tuple[list[bytes], AsyncIterator[list[bytes]], AttemptSpan | None]:
            events = open_events(engine, deployment, answering)
            # The attempt's span, when traced: the stream's lease ends it.
            span: AttemptSpan | None = None if self.tracing is None else attempting.get()  # type: ignore[assignment]
            try:
                return await events.__anext__(), events, span
            except StopAsyncIteration:
                return [], events, span
            except BaseException:
                await events.aclose()  # type: ignore[attr-defined]
                raise

        # Counted as under way from the start, as blocking calls are: the usage writer groups the
        # rows of the calls it counts into one commit (committing each stream's row on its own
        # cost streams at concurrency 64 about 100 us of CPU each, gwbench). The stream outlives
        # this block: its lease ends the count (`metered_calls_left`).
        calls = self._writer.metered_calls
        calls.began()
        try:
            await self._admit_model(billing.key, model)
            (first, events, span), answering, index = await self._first_answer(model, ChatEngine, billing.key,
                                                                               affinity, first_batch, hold=True)
        except BaseException as exc:
            try:
                if isinstance(exc, _Exhausted):
                    await self._failed(billing, exc.deployment, exc.error, started, True)
                    raise exc.error from None
                raise
            finally:
                calls.ended()
        deployment = answering.deployments[index]
        self.metrics.first_token(answering.id, deployment.name, time.perf_counter() - started)
        lease = StreamLease(self, billing, answering, deployment, index, first, events, started)
        if span is not None:
            lease.span = span
            lease.events = span.watch(first, events)
        return lease


def _noted(usage: Usage) -> None:
    """Tell the request's access log which model and deployment answered, and the tokens."""
    note = current.get()
    if note is not None:
        note.metered(usage.model, usage.deployment, usage.prompt_tokens, usage.completion_tokens)


class _Exhausted(Exception):
    """Internal: the call's last failure (final, or the last of its failovers) and where it happened."""

    def __init__(self, error: InferdError, deployment: Deployment | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.deployment = deployment


class StreamLease:
    """A stream that started on one deployment: its first events, the rest, and its slot until `finish`."""

    def __init__(self, stage: CallStage, billing: Billing, model: Model, deployment: Deployment, index: int,
                 first: list[bytes], events: AsyncIterator[list[bytes]], started: float) -> None:
        self.model = model
        self.deployment = deployment
        self.first = first
        self.events = events
        self.started = started
        self._stage = stage
        self._billing = billing
        self._index = index
        self._slot = True  # holds a slot of its deployment
        self._active = True  # counted in the usage writer's calls under way
        self.span: AttemptSpan | None = None  # the attempt's trace span, when traced: ended with the stream

    async def finish(self, status: int, prompt: int, completion: int, cached: int = 0,
                     guardrail: str | None = None) -> Usage:
        """Free the slot, then meter the stream (durable before this returns); `guardrail`: the
        output guardrail that ended it."""
        self._free_slot()
        usage = usage_for(self._billing.key, self.deployment.config, self._billing.workspace, status, prompt,
                          completion, started=self.started, cached=cached, metadata=self._billing.metadata,
                          price_factor=self._billing.price_factor, guardrail=guardrail)
        _noted(usage)
        if self.span is not None:
            self.span.finished(status, prompt, completion)
        try:
            await self._stage.record(usage, self._billing.key)
        finally:
            self._leave()
        return usage

    def release(self) -> None:
        """Free the slot without metering (idempotent; `finish` does both)."""
        self._free_slot()
        self._leave()
        if self.span is not None:
            self.span.end()

    def _free_slot(self) -> None:
        if self._slot:
            self._slot = False
            self.model.pool.release(self._index)

    def _leave(self) -> None:
        if self._active:
            self._active = False
            self._stage.metered_calls_left()

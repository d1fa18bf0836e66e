"""The app's parts wired together: `build_services(settings)` opens the database, the limits, the
usage writer and every engine, and hands them out as one `Services` (no module-level state)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.auth.exchange import KeyExchange, build_exchange
from inferd.auth.key_lookup import KeyLookup
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.cache.service import ResponseCache
from inferd.cache.store import open_store
from inferd.calls.health import HealthProber
from inferd.calls.stage import CallStage
from inferd.catalogue import ModelCatalogue
from inferd.config import Catalogue, Settings, load_catalogue
from inferd.config_tracing import resolve_tracing
from inferd.engines.registry import EngineRegistry, default_registry
from inferd.limits.base import Limits
from inferd.limits.memory import MemoryRateLimiter, MemorySpendCounter
from inferd.limits.worker_window import FILE_ENV as WORKER_RATE_FILE_ENV, WorkerRateLimiter
from inferd.limits.redis import RedisLimits
from inferd.limits.resp import connect as connect_redis
from inferd.metering.group_commit import UsageWriter, usage_sink
from inferd.metering.journal_pg import PgJournaledUsageWriter
from inferd.metering.journal_sqlite import JournaledUsageWriter
from inferd.metering.recorder import UsageRecorder
from inferd.metering.spend import load_spend
from inferd.observe.metrics import Metrics
from inferd.services.audio import AudioService
from inferd.services.batches import BatchService
from inferd.services.chat import ChatService
from inferd.services.embeddings import EmbeddingsService
from inferd.services.images import ImagesService
from inferd.services.responses import ResponsesService
from inferd.services.generate import Generation
from inferd.services.web_search import WebSearch
from inferd.guardrails.policy import Guardrails
from inferd.services.ingest.service import Ingestion, embedding_model
from inferd.services.rerank import RerankService
from inferd.services.retrieval import Retriever
from inferd.services.sources import attach_sources
from inferd.services.conversations import ConversationService
from inferd.store.batches import BatchRepository
from inferd.store.db import create_engine, migrate
from inferd.store.files import build_file_store
from inferd.store.conversations import ConversationRepository
from inferd.store.hot_sqlite import HotSqlite
from inferd.store.key_cache import KeyCache
from inferd.store.keys import KeyRepository
from inferd.store.orgs import OrgRepository
from inferd.store.responses import ResponseRepository
from inferd.store.users import UserRepository

if TYPE_CHECKING:
    from inferd.tracing.export import SpanQueue
    from inferd.tracing.spans import Tracing


@dataclass
class Services:
    """Everything a request may need, built once per app (no module-level state)."""

    settings: Settings
    config: Catalogue
    db: AsyncEngine
    hot: HotSqlite | None
    orgs: OrgRepository
    keys: KeyRepository
    key_lookup: KeyLookup
    auth: Authenticator
    limits: Limits
    metrics: Metrics
    writer: UsageRecorder
    catalogue: ModelCatalogue
    stage: CallStage
    health: HealthProber
    chat: ChatService
    embeddings: EmbeddingsService
    rerank: RerankService
    audio: AudioService
    images: ImagesService
    retriever: Retriever
    generation: Generation
    guardrails: Guardrails | None
    ingestion: Ingestion
    exchange: KeyExchange
    conversations: ConversationService
    batches: BatchService
    responses: ResponsesService
    cache: ResponseCache | None = None  # `[cache] enabled`; None: off
    tracing: "Tracing | None" = None  # `[tracing]` (or OTEL_EXPORTER_OTLP_ENDPOINT); None: off
    trace_queue: "SpanQueue | None" = None  # the spans waiting for export, and its thread

    async def close(self) -> None:
        """Flush usage rows and release every connection."""
        await self.health.close()
        await self.writer.close()
        await self.responses.store.close()
        await self.catalogue.close()
        await self.limits.close()
        await self.keys.close()
        if self.generation.web is not None:
            await self.generation.web.aclose()
        if self.guardrails is not None:
            await self.guardrails.aclose()
        if self.hot is not None:
            self.hot.close()
        await self.db.dispose()
        if self.trace_queue is not None:
            await asyncio.to_thread(self.trace_queue.close)  # joins the export thread: off the event loop


def load_config(settings: Settings, registry: EngineRegistry | None = None) -> tuple[Catalogue, EngineRegistry]:
    """The engine registry and the checked configuration file (ConfigError when wrong)."""
    registry = registry or default_registry()
    return load_catalogue(settings.config_path, registry.option_keys(), settings.model_dir), registry


async def build_services(settings: Settings) -> Services:
    """Open the database (migrating it), the limits, the writer and every engine."""
    config, registry = load_config(settings)
    db = create_engine(settings.database_url)
    await migrate(db)
    hot = HotSqlite(db.url.database) if db.dialect.name == "sqlite" and db.url.database else None
    writer: UsageRecorder | None = None

    async def loader(scope: str, owner: str, since: str | None) -> float:  # rows still in a journal count
        if writer is not None:
            await writer.settle()
        return await load_spend(db, scope, owner, since, hot)

    redis = connect_redis(settings.redis_url) if settings.redis_url else None
    if redis is not None:
        limits: Limits = RedisLimits(redis, settings.redis_prefix, loader)
    else:
        shared_window = os.environ.get(WORKER_RATE_FILE_ENV)  # a worker of `serve --workers N`
        rate = WorkerRateLimiter(Path(shared_window)) if shared_window else MemoryRateLimiter()
        limits = Limits(rate, MemorySpendCounter(loader))
    metrics = Metrics()
    if hot is not None:
        writer = JournaledUsageWriter(hot, limits.spend, metrics)
    elif db.dialect.name == "postgresql":
        writer = PgJournaledUsageWriter(db.url, settings.data_dir, limits.spend, metrics)
    else:  # SQLite in memory (tests): nothing outlives the process anyway
        writer = UsageWriter(usage_sink(db), limits.spend, metrics)
    writer.start()
    # On PostgreSQL the lookup keeps records until a change through the repository drops them.
    key_cache: KeyCache[KeyRecord] | None = KeyCache(db) if db.dialect.name == "postgresql" else None
    keys = KeyRepository(db, key_cache)
    key_lookup = KeyLookup(db, hot, key_cache)
    catalogue = ModelCatalogue(config.models, registry)
    stage = CallStage(catalogue, writer, metrics, limits)
    tracing, trace_queue = _start_tracing(config, settings, metrics)
    stage.tracing = tracing
    health = HealthProber(catalogue)
    health.start()
    users = UserRepository(db)
    # Built only when a guardrail is configured: without one the chat corridor checks one None.
    guardrails = Guardrails(config.guardrails, metrics.guardrail) if config.guardrails else None
    if tracing is not None:
        tracing.guardrails = guardrails  # a call a guardrail checks is never captured in a span
    # Built only when the response cache is on: off, the routes test one None.
    cache = ResponseCache(config.cache, open_store(db, redis, settings.redis_prefix, config.cache.ttl_s,
                                                   config.cache.max_entries),
                          writer, metrics) if config.cache.enabled else None
    if cache is not None and guardrails is not None:
        cache.guardrails_fingerprint = hashlib.sha256(repr(config.guardrails).encode()).hexdigest()[:16]
    chat = ChatService(catalogue, stage, guardrails, cache)
    conversations = attach_sources(ConversationService(ConversationRepository(db), users), db)
    retriever = Retriever(db, catalogue, stage, embedding_model(config.conversations))
    return Services(settings=settings, config=config, db=db, hot=hot, orgs=OrgRepository(db), keys=keys,
                    key_lookup=key_lookup, auth=Authenticator(key_lookup), limits=limits, metrics=metrics,
                    writer=writer, catalogue=catalogue, stage=stage,
                    health=health, chat=chat, embeddings=EmbeddingsService(catalogue, stage, guardrails, cache),
                    rerank=RerankService(catalogue, stage, cache), cache=cache,
                    audio=AudioService(catalogue, stage, config.audio.max_duration_s),
                    images=ImagesService(catalogue, stage), retriever=retriever,
                    guardrails=guardrails, generation=Generation(catalogue, chat, conversations, retriever, config.conversations,
                                          WebSearch(config.web_search) if config.web_search else None,
                                          tracing=tracing),
                    tracing=tracing, trace_queue=trace_queue,
                    ingestion=Ingestion(db, catalogue, stage, conversations, config.conversations),
                    exchange=build_exchange(Authenticator(key_lookup), keys, users, config.idp, settings.config_path),
                    conversations=conversations,
                    batches=BatchService(BatchRepository(db),
                                         build_file_store(db, settings.data_dir, config.storage), config.batches),
                    responses=ResponsesService(ResponseRepository(db, hot)))


def _start_tracing(config: Catalogue, settings: Settings, metrics: Metrics
                   ) -> "tuple[Tracing | None, SpanQueue | None]":
    """The tracer and its export queue when a collector is named (the file's `[tracing]` or the
    OTEL_* variables); (None, None) otherwise, with nothing of OpenTelemetry imported."""
    resolved = resolve_tracing(config.tracing, settings.otlp_endpoint, settings.otlp_traces_endpoint)
    if resolved is None:
        return None, None
    from inferd.tracing.export import DROP_REASONS, start_tracing  # imports opentelemetry: only when on

    for reason in DROP_REASONS:
        metrics.trace_spans_dropped(reason, 0)  # every reason shown at 0 from the start
    return start_tracing(*resolved, metrics.trace_spans_dropped)

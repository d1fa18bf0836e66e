"""The response cache in the corridor: a request's `Ticket` (its key, what its `Cache-Control`
allows), the lookup before any engine, the hit's usage row, and the store after a complete answer.

A service asks `ResponseCache.ticket` only when the cache is configured on (`[cache] enabled`):
off, the corridor tests one attribute and nothing here runs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable

from inferd.auth.key_record import KeyRecord
from inferd.cache.control import CacheControl, parse_cache_control
from inferd.cache.key import cache_key, chat_form, deterministic
from inferd.cache.store import CacheStore, Entry
from inferd.catalogue import Model
from inferd.config_cache import CacheConfig
from inferd.metering.recorder import UsageRecorder
from inferd.metering.usage import Usage
from inferd.observe.metrics import Metrics
from inferd.observe.requests import current

log = logging.getLogger("inferd.cache")

CACHE_HEADER = b"x-inferd-cache"
CACHE_DEPLOYMENT = "cache"  # the `deployment` of a hit's usage row
_RESULT_HEADERS = {result: [(CACHE_HEADER, result.encode())] for result in ("miss", "bypass")}


@dataclass(slots=True)
class Ticket:
    """One request's dealings with the cache: its entry's key (None: the cache is bypassed), and
    whether it may read and store."""

    cache: "ResponseCache"
    key: str | None
    org: str
    model: str
    control: CacheControl

    @property
    def readable(self) -> bool:
        return self.key is not None and self.control.read

    @property
    def storable(self) -> bool:
        return self.key is not None and self.control.store

    async def lookup(self) -> Entry | None:
        """The stored answer, if there is one this request may have (counted as a hit or a miss;
        the response says which)."""
        if not self.readable:
            return None
        assert self.key is not None
        cache = self.cache
        max_age = self.control.max_age
        try:
            entry = await cache.store.get(self.key, cache.config.ttl_s if max_age is None else max_age)
        except Exception as exc:  # a cache that cannot answer is a miss, never a failed call
            log.warning("response cache lookup failed: %s", exc)
            entry = None
        if entry is None:
            cache.metrics.cache(self.model, "miss")
            _headers(_RESULT_HEADERS["miss"])
        return entry

    async def answered(self, entry: Entry, key: KeyRecord, workspace: str, metadata: dict[str, str] | None,
                       started: float) -> Usage:
        """Bill a hit: one usage row with `cache_hit`, the tokens as first billed, cost 0 and the
        cost first billed as `saved_usd`, durable before the answer goes (no tokens counted against
        tpm, no spend against budgets); the `x-inferd-cache` and `age` headers."""
        cache = self.cache
        usage = Usage(org=key.org_slug, deployment=CACHE_DEPLOYMENT, key_id=key.charged_key_id,
                      user_id=str(key.user_id) if key.user_id is not None else None, model=self.model,
                      workspace=workspace, prompt_tokens=entry.prompt_tokens,
                      completion_tokens=entry.completion_tokens, cached_prompt_tokens=entry.cached_prompt_tokens,
                      latency_ms=int((time.perf_counter() - started) * 1000), status_code=200, cost_usd=0.0,
                      metadata=metadata, team_id=key.team_id, cache_hit=True, saved_usd=entry.cost_usd)
        note = current.get()
        if note is not None:
            note.metered(usage.model, usage.deployment, usage.prompt_tokens, usage.completion_tokens)
        await cache.writer.record(usage)
        cache.metrics.cache(self.model, "hit", entry.cost_usd)
        _headers([(CACHE_HEADER, b"hit"), (b"age", str(entry.age()).encode())])
        return usage

    async def save(self, reply: dict[str, Any], usage: Usage) -> None:
        """Store a complete answer with what it was billed (a cache that cannot store is logged,
        never a failed call)."""
        if usage.status_code == 200:
            await self.save_entry(Entry(reply, usage.prompt_tokens, usage.cached_prompt_tokens,
                                        usage.completion_tokens, usage.cost_usd))

    async def save_entry(self, entry: Entry) -> None:
        """Store an entry (when the request allows it)."""
        if not self.storable:
            return
        assert self.key is not None
        try:
            await self.cache.store.put(self.key, self.org, self.model, entry)
        except Exception as exc:
            log.warning("response cache store failed: %s", exc)


def _headers(headers: list[tuple[bytes, bytes]]) -> None:
    note = current.get()
    if note is not None:
        note.cache = headers


class ResponseCache:
    """The configured cache: its settings, its store, and where hits are billed and counted."""

    def __init__(self, config: CacheConfig, store: CacheStore, writer: UsageRecorder, metrics: Metrics) -> None:
        self.config = config
        self.store = store
        self.writer = writer
        self.metrics = metrics

    # What the configured guardrails are (set by the wiring when some are): part of every entry's
    # scope, so a reply stored under other guardrails (before a configuration change) is never served.
    guardrails_fingerprint = ""

    def scope(self, key: KeyRecord) -> str:
        """Who shares entries: the key (default), its team (a key without one: itself), or its org;
        and under which guardrails (the configured ones and those the org chose): stored replies have
        been through the output guardrails of their time, so a change of guardrails starts afresh."""
        scope = self.config.scope
        if scope == "org":
            owner = "org:" + key.org_slug
        elif scope == "team" and key.team_id is not None:
            owner = f"team:{key.team_id}"
        else:
            owner = "key:" + key.access_key_id
        if self.guardrails_fingerprint:
            owner += "|guardrails:" + self.guardrails_fingerprint + ":" + ",".join(key.org_guardrails)
        return owner

    def ticket(self, key: KeyRecord, model: Model, capability: str, body: dict[str, Any], form: dict[str, Any],
               headers: Iterable[tuple[bytes, bytes]]) -> Ticket:
        """The request's ticket: bypassed for a model with `cache = false`, a request whose output is
        not determined (unless `only_deterministic = false`), or `Cache-Control: no-store`."""
        control = parse_cache_control(_cache_control(headers))
        bypass = not model.config.cache or not control.store and not control.read or (
            capability == "chat" and self.config.only_deterministic and not deterministic(body))
        if bypass:
            self.metrics.cache(model.id, "bypass")
            _headers(_RESULT_HEADERS["bypass"])
            return Ticket(self, None, key.org_slug, model.id, control)
        if not control.read:  # no-cache: stored, never read: a miss
            self.metrics.cache(model.id, "miss")
            _headers(_RESULT_HEADERS["miss"])
        return Ticket(self, cache_key(self.scope(key), model.id, capability, form), key.org_slug, model.id, control)

    async def lookup(self, key: KeyRecord, model: Model, capability: str, body: dict[str, Any],
                     headers: Iterable[tuple[bytes, bytes]]) -> tuple[Ticket, dict[str, Any] | None]:
        """For embeddings and rerank (whose output the request determines): the ticket, and the
        stored answer, billed as a hit in the capability's workspace, when there is one."""
        started = time.perf_counter()
        ticket = self.ticket(key, model, capability, body, chat_form(body), headers)
        entry = await ticket.lookup()
        if entry is None:
            return ticket, None
        await ticket.answered(entry, key, capability, None, started)
        return ticket, entry.reply

    async def clear(self, org: str) -> int:
        """Empty the org's entries (`DELETE /v1/admin/cache`)."""
        return await self.store.clear(org)

    async def close(self) -> None:
        await self.store.close()


def _cache_control(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"cache-control":
            return value.decode("latin-1")
    return None

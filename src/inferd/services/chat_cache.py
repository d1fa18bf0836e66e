"""The chat corridor with the response cache on: a call with a ticket (`ChatCall.cache`) is
answered from its entry when one was found (blocking, or replayed as a stream of the same framing),
and a complete answer is stored once it ended normally. Messages and Responses are translated to
chat before they reach here, so they share entries with `/v1/chat/completions`, each answered in
its own wire shape.

Never stored: a failure (raised before anything is stored), a stream that ends with an error
chunk, is cut before every choice finished, or is left by its client (the generator is closed
before its end), and a refusal (`content_filter`).
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator, Protocol

from inferd.cache.replay import Assembler, complete_reply, replay_chunks
from inferd.cache.service import Ticket
from inferd.cache.store import Entry
from inferd.calls.stage import Metered
from inferd.calls.pacing import Pacer
from inferd.metering.usage import token_cost
from inferd.services.chat_call import DONE_FRAME, ChatCall, usage_numbers
from inferd.services.chat_stream import StreamRelay, StreamSource


class CachedSource(StreamSource, Protocol):
    """What the cached corridor asks of the chat service: its stream, and its engine's blocking path."""

    async def complete(self, call: ChatCall, *, record: bool = True,
                       pacer: Pacer | None = None) -> Metered[dict[str, Any]]: ...


async def complete_cached(service: CachedSource, call: ChatCall, record: bool,
                          pacer: Pacer | None) -> Metered[dict[str, Any]]:
    """`ChatService.complete` for a call with a ticket: its entry, billed as a hit, or the engine's
    answer, stored when complete."""
    ticket = call.cache
    assert ticket is not None
    entry = call.hit
    if entry is not None:
        usage = await ticket.answered(entry, call.key, call.workspace, call.metadata, time.perf_counter())
        return Metered(entry.reply, usage, call.model, call.model.deployments[0])
    call.cache = None  # the engine's path, once: `complete` tests this attribute
    try:
        metered = await service.complete(call, record=record, pacer=pacer)
    finally:
        call.cache = ticket
    if ticket.storable and complete_reply(metered.value):
        await ticket.save(metered.value, metered.usage)
    return metered


async def stream_cached(service: CachedSource, call: ChatCall, sse: bool) -> AsyncIterator[Any]:
    """`ChatService.stream` (`sse`: SSE frames) or `chunk_batches` (lists of chunk JSON) for a call
    with a ticket: the entry replayed, or the engine's stream relayed and stored once it ended."""
    ticket = call.cache
    assert ticket is not None
    entry = call.hit
    if entry is not None:
        await ticket.answered(entry, call.key, call.workspace, call.metadata, time.perf_counter())
        chunks = replay_chunks(entry.reply)
        yield b"".join([b"data: " + chunk + b"\n\n" for chunk in chunks]) + DONE_FRAME if sse else chunks
        return
    relay = StreamRelay(service, call)
    stream = relay.frames() if sse else relay.chunk_batches()
    assembler = Assembler() if ticket.storable else None  # `no-cache` stores; nothing else gets here unstored
    try:
        async for item in stream:
            if assembler is not None:
                if not sse:
                    for data in item:
                        assembler.feed(data)
                else:
                    assembler.feed_sse(item)
                    if item.endswith(DONE_FRAME):
                        # Stored before the last frame goes: the relay closes the stream once it has it.
                        await _store(ticket, call, relay, assembler)
            yield item
        if assembler is not None and not sse:  # chunk batches end when they run out (an error came as a chunk)
            await _store(ticket, call, relay, assembler)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def _store(ticket: Ticket, call: ChatCall, relay: StreamRelay, assembler: Assembler) -> None:
    """Store the stream's answer when it is complete, with what it was billed."""
    reply = assembler.completion()
    lease = relay._lease  # the deployment that answered: its prices are what the stream was billed
    numbers = usage_numbers(reply.get("usage")) if reply is not None else None
    if reply is None or lease is None or numbers is None:
        return
    prompt, completion, cached = numbers
    config = lease.deployment.config
    await ticket.save_entry(Entry(reply, prompt, cached if config.prefix_cache else 0, completion,
                                  token_cost(config.cost, prompt, completion, call.price_factor)))

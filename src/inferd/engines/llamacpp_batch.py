"""Continuous batching for the in-process llama.cpp model: every request in flight decodes in one
`llama_decode` call per step, each as its own sequence of one context.

One decode thread owns the context. Each step it admits waiting requests into free sequences,
then builds one batch of the next token of every generating sequence plus a chunk of the prompts
still being read, decodes it, and samples each sequence's next token with that request's own
sampler chain (temperature, top-p, penalties, grammar, seed). A request joins at the next step and
leaves when it ends or its client goes, so a newcomer waits one step, not for the others to finish.

The KV cache is one pool of cells shared by the sequences (`kv_unified`): llama.cpp then reads a
step as one micro-batch whatever sequences it holds (a cache split per sequence reads only runs of
consecutive sequence ids together, and a prompt chunk apart from the generating tokens), and a
prefix two sequences share is held once. A sequence keeps its tokens after its request ends, so a
new request reads only what no sequence holds yet: the next turn of a conversation, or a second
request with the same system prompt. Every step attends over the cells in use, so idle sequences
keep at most IDLE_CELLS tokens between them, the least recently used dropped first.

Results go to the request's event loop as lists of items, once per step per loop: text (str), then
("stop" | "length", completion tokens) or an exception, then `END`.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from inferd.engines.llamacpp_sampling import sampler_chain
from inferd.engines.llamacpp_text import StopText
from inferd.errors import EngineError, EngineUnavailable

END = object()
BATCH_TOKENS = 512
# While others are generating, a newcomer's prompt is read this many tokens a step, so that their
# streams pause for a fraction of a second, not for the whole of a long prompt.
BUSY_PROMPT_CHUNK = 128
# Cached tokens that idle sequences keep for prefix reuse: enough for a few conversations' next
# turns, few enough that the attention over them stays a small part of a step.
IDLE_CELLS = 1024


@dataclass(eq=False)
class Job:
    """One request: its prompt, its sampling settings and where its results go."""

    tokens: list[int]
    sampling: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    cancelled: bool = False
    sampler: Any = None  # its chain, made and freed by the decode thread
    text: StopText | None = None
    seq: int = -1
    todo: list[int] = field(default_factory=list)  # prompt tokens not yet in the cache
    pending: int = -1  # the sampled token not yet in the cache
    produced: int = 0


@dataclass(eq=False)
class _Sequence:
    seq_id: int
    cached: list[int] = field(default_factory=list)  # exactly the tokens in its KV cells, in order
    job: Job | None = None
    last_used: int = 0


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Batcher:
    """The decode thread and the context it owns."""

    def __init__(self, model: Any, n_ctx: int, cells: int, sequences: int, threads: int, name: str) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = cells
        params.n_batch = params.n_ubatch = BATCH_TOKENS
        params.n_seq_max = sequences
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            raise EngineError(f"{name}: llama.cpp could not create a context for {sequences} sequences")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._n_ctx = n_ctx
        self._batch = llama_cpp.llama_batch_init(BATCH_TOKENS, 0, 1)
        self._sequences = [_Sequence(i) for i in range(sequences)]
        self._waiting: deque[Job] = deque()
        self._active: list[Job] = []  # in admission order: prompts are read first come, first served
        self._cond = threading.Condition()
        self._closed = False
        self._full = False  # the cache overflowed: admit no one until a request ends
        self._clock = 0
        self.prompt_tokens_read = 0  # prompt tokens decoded: what prefix reuse saves shows here
        self.gave_way = 0  # requests sent back to the queue by a full cache
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._out: dict[asyncio.AbstractEventLoop, list[tuple[Job, list[Any]]]] = defaultdict(list)
        self._thread = threading.Thread(target=self._run, name=f"llamacpp-{name}-decode", daemon=True)
        self._thread.start()

    # -- the loop side ------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue a job; its results arrive on `job.queue`. The batcher frees its sampler."""
        with self._cond:
            if self._closed:
                raise EngineError("the model is shutting down")
            job.todo = list(job.tokens)
            self._waiting.append(job)
            self._cond.notify()

    def cancel(self, job: Job) -> None:
        """Stop a job at the next step (its client left)."""
        job.cancelled = True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)

    # -- the decode thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._waiting and not self._active:
                    self._cond.wait()
                if self._closed:
                    for job in [*self._waiting, *self._active]:
                        self._finish(job, EngineError("the model is shutting down"))
                    self._waiting.clear()
                    self._active.clear()
                    self._send()
                    return
            try:
                with self._cond:
                    self._admit()
                self._step()
            except Exception as exc:  # a failed decode fails the requests in it, not the engine
                for job in list(self._active):
                    self._forget(job)
                    self._finish(job, exc if isinstance(exc, EngineError) else EngineError(f"llama.cpp: {exc}"))
            self._send()

    def _admit(self) -> None:
        """Give waiting jobs free sequences, each starting from the longest prefix of its prompt
        that any sequence holds: in place when that sequence is free, else shared from it."""
        for job in [j for j in self._waiting if j.cancelled]:
            self._waiting.remove(job)
            self._finish(job, None)
        while self._waiting and not self._full:
            free = [s for s in self._sequences if s.job is None]
            if not free:
                return
            job = self._waiting.popleft()
            if job.sampler is None:  # else it is back after giving way (_give_way)
                try:
                    job.sampler = sampler_chain(self._vocab, self._n_vocab, job.sampling)
                except Exception as exc:
                    self._finish(job, exc if isinstance(exc, EngineError) else EngineError(f"llama.cpp: {exc}"))
                    continue
                job.text = StopText(job.sampling["stop"])
            # A seeded request reads its whole prompt again: a reused prefix was read in other
            # batches, and its logits would differ in the last bits.
            fresh = "seed" in job.sampling and not job.produced
            need = job.todo  # the prompt, or after giving way the prompt and what it generated
            held = {s.seq_id: 0 if fresh else _common_prefix(s.cached, need) for s in self._sequences}
            source = max(self._sequences, key=lambda s: (held[s.seq_id], s.job is None))
            if source.job is not None or not held[source.seq_id]:
                # An empty sequence if there is one, else the idle one used longest ago.
                target = min(free, key=lambda s: (bool(s.cached), s.last_used))
            else:
                target = source
            keep = max(0, min(held[source.seq_id], len(need) - 1))  # one token at least is read: its logits
            if target is source:
                llama_cpp.llama_memory_seq_rm(self._memory, target.seq_id, keep, -1)
                del target.cached[keep:]
            else:  # the prefix is another sequence's: share its cells (no copy in a unified cache)
                llama_cpp.llama_memory_seq_rm(self._memory, target.seq_id, 0, -1)
                if keep:
                    llama_cpp.llama_memory_seq_cp(self._memory, source.seq_id, target.seq_id, 0, keep)
                target.cached = source.cached[:keep]
            self._clock += 1
            target.job, target.last_used = job, self._clock
            job.seq, job.todo = target.seq_id, need[keep:]
            self._active.append(job)

    def _step(self) -> None:
        for job in [j for j in self._active if j.cancelled]:
            self._release(job)
            self._finish(job, None)
        if not self._active:
            return
        batch = self._batch
        n = 0
        samples: list[tuple[Job, int]] = []
        for job in self._active:
            if job.pending >= 0:
                self._put(n, job.pending, len(self._sequences[job.seq].cached), job.seq, True)
                samples.append((job, n))
                n += 1
        budget = min(BUSY_PROMPT_CHUNK if n else BATCH_TOKENS, BATCH_TOKENS - n)
        reading: list[tuple[Job, int]] = []
        for job in self._active:
            if not job.todo or budget <= 0:
                continue
            chunk = job.todo[:budget]
            last = len(chunk) == len(job.todo)
            start = len(self._sequences[job.seq].cached)
            for k, token in enumerate(chunk):
                self._put(n, token, start + k, job.seq, last and k == len(chunk) - 1)
                n += 1
            if last:
                samples.append((job, n - 1))
            reading.append((job, len(chunk)))
            budget -= len(chunk)
        batch.n_tokens = n
        code = llama_cpp.llama_decode(self._ctx, batch)  # ctypes lets go of the GIL for this call
        if code == 1 and self._trim_idle(0):
            code = llama_cpp.llama_decode(self._ctx, batch)
        if code == 1:  # no room even with idle sequences emptied: the newest request gives way
            self._give_way()
            return
        if code != 0:
            raise EngineError(f"llama_decode failed ({code})")
        for job, count in reading:
            sequence = self._sequences[job.seq]
            sequence.cached.extend(job.todo[:count])
            self.prompt_tokens_read += count
            del job.todo[:count]
        for job, index in samples:
            if job.pending >= 0:
                self._sequences[job.seq].cached.append(job.pending)
                job.pending = -1
            self._sample(job, index)

    def _put(self, i: int, token: int, pos: int, seq: int, logits: bool) -> None:
        batch = self._batch
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits

    def _sample(self, job: Job, index: int) -> None:
        token = llama_cpp.llama_sampler_sample(job.sampler, self._ctx, index)
        if self._is_eog(token):
            self._end(job, "stop")
            return
        job.produced += 1
        text = job.text.feed(self._piece(token))  # type: ignore[union-attr]
        if text:
            self._out[job.loop].append((job, [text]))
        if job.text.stopped:  # type: ignore[union-attr]
            self._end(job, "stop")
        elif job.produced >= job.sampling["max_tokens"] or len(self._sequences[job.seq].cached) >= self._n_ctx:
            self._end(job, "length")
        else:
            job.pending = token

    def _give_way(self) -> None:
        """The cache is full: the newest request leaves it and goes back to the head of the queue
        with everything it has read and generated as the prompt to read again, and no request is
        admitted until one ends. Its stream pauses; nothing it has sent is lost or repeated."""
        victim = self._active[-1]
        if len(self._active) == 1:  # alone and still no room: the cache is smaller than its window
            self._forget(victim)
            self._finish(victim, EngineUnavailable("the model's cache cannot hold this request"))
            return
        history = self._sequences[victim.seq].cached + ([victim.pending] if victim.pending >= 0 else [])
        victim.todo, victim.pending = history + victim.todo, -1
        self._forget(victim)
        victim.seq = -1
        with self._cond:
            self._waiting.appendleft(victim)
        self._full = True
        self.gave_way += 1

    def _end(self, job: Job, finish: str) -> None:
        rest = job.text.flush()  # type: ignore[union-attr]
        self._release(job)
        items: list[Any] = [rest] if rest else []
        self._out[job.loop].append((job, [*items, (finish, job.produced)]))
        self._finish(job, None)

    def _release(self, job: Job) -> None:
        self._active.remove(job)
        sequence = self._sequences[job.seq]
        self._clock += 1
        sequence.job, sequence.last_used = None, self._clock
        self._full = False
        self._trim_idle(IDLE_CELLS)

    def _trim_idle(self, limit: int) -> bool:
        """Empty the least recently used idle sequences until they hold at most `limit` tokens;
        True when any was emptied."""
        idle = sorted((s for s in self._sequences if s.job is None and s.cached), key=lambda s: s.last_used)
        total = sum(len(s.cached) for s in idle)
        trimmed = False
        for sequence in idle:
            if total <= limit:
                break
            total -= len(sequence.cached)
            llama_cpp.llama_memory_seq_rm(self._memory, sequence.seq_id, 0, -1)
            sequence.cached = []
            trimmed = True
        return trimmed

    def _forget(self, job: Job) -> None:
        """After a failed decode: the sequence's cache is no longer known, so empty it."""
        sequence = self._sequences[job.seq]
        llama_cpp.llama_memory_seq_rm(self._memory, sequence.seq_id, 0, -1)
        sequence.cached.clear()
        self._release(job)

    def _finish(self, job: Job, error: BaseException | None) -> None:
        if error is not None:
            self._out[job.loop].append((job, [error]))
        self._out[job.loop].append((job, [END]))
        if job.sampler is not None:
            llama_cpp.llama_sampler_free(job.sampler)
            job.sampler = None

    def _send(self) -> None:
        """Hand this step's results to each event loop in one call."""
        for loop, results in self._out.items():
            if results:
                try:
                    loop.call_soon_threadsafe(_deliver, results)
                except RuntimeError:  # that loop has closed: nobody is waiting
                    pass
        self._out.clear()

    def _piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            buffer = ctypes.create_string_buffer(64)
            size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, 64, 0, False)
            if size < 0:
                buffer = ctypes.create_string_buffer(-size)
                size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, -size, 0, False)
            piece = self._pieces[token] = buffer.raw[:size]
        return piece

    def _is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))
        return eog


def _deliver(results: list[tuple[Job, list[Any]]]) -> None:
    for job, items in results:
        for item in items:
            job.queue.put_nowait(item)

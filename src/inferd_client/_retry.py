"""The spec's retry policy: retry 429 and 5xx only, on reads only, exponential backoff with jitter.

Reads are GET requests plus POSTs that change nothing on the server (`/v1/chat/count_tokens` is
free and writes no usage row). Every other POST, PATCH and DELETE is a write and is sent exactly
once: a chat call, an upload, a batch creation or a cancel that timed out may already have run
(and been billed), so repeating it is the caller's decision. Reads are also retried when the
connection fails or times out; writes are not, for the same reason.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before sending a read again.

    The n-th retry waits `base_delay * 2**(n-1)`, capped at `max_delay`, shortened by up to
    `jitter` of itself at random so that clients that failed together do not retry together. A
    `Retry-After` header wins over the backoff (the server knows when a slot frees); a
    `Retry-After` longer than `max_retry_after` is not waited for: the error is raised at once.
    `sleep`, `async_sleep` and `random` are injectable so tests run without waiting.
    """

    max_attempts: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    async_sleep: Callable[[float], Awaitable[None]] | None = field(default=None, repr=False)
    random: Callable[[], float] = field(default=random.random, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter must be within 0..1")

    def backoff(self, retry_number: int) -> float:
        """Seconds to wait before retry `retry_number` (1 for the first retry)."""
        nominal = min(self.max_delay, self.base_delay * (2 ** (retry_number - 1)))
        return nominal * (1.0 - self.jitter * self.random())

    def delay_after_status(self, attempt: int, status: int, retry_after: float | None) -> float | None:
        """Seconds to wait after attempt number `attempt` (1-based) answered `status`; None: give up."""
        if status not in RETRY_STATUSES or attempt >= self.max_attempts:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        return self.backoff(attempt)

    def delay_after_connection_error(self, attempt: int) -> float | None:
        """Seconds to wait after attempt `attempt` failed to connect or timed out; None: give up."""
        return None if attempt >= self.max_attempts else self.backoff(attempt)

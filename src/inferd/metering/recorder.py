"""What every usage writer shares: the interface callers see (`UsageRecorder`), the count of
metered calls under way (`MeteredCalls`), and the step after rows are durable (`AfterCommit`),
taken by the group commit, the journal writers and the batch worker alike."""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Protocol, Sequence

from inferd.limits.base import SpendCounter
from inferd.metering.usage import Usage
from inferd.observe.metrics import Metrics
from inferd.store.usage_write import Amounts

log = logging.getLogger("inferd.metering")


class MeteredCalls:
    """How many metered calls are under way: the group commit's hint (a row whose call is the only
    one under way is committed at once, without waiting for rows to share its transaction).

    `with writer.metered_calls:` counts a call for the block. A stream outlives the block that
    opens it: it is counted from `began()` to `ended()`. One object per writer, reused by every
    call (nothing allocated per call)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __enter__(self) -> None:
        self.count += 1

    def __exit__(self, *_: object) -> None:
        self.count -= 1

    def began(self) -> None:
        """A call that outlives this block (a stream) is under way."""
        self.count += 1

    def ended(self) -> None:
        """A call counted by `began` ended."""
        self.count -= 1


class AfterCommit:
    """What follows usage rows becoming durable, for every writer: they count in the usage metrics
    and their spend goes to the spend counters, so budgets see it at once (on every replica with
    Redis). A failing counter is logged, not raised: the rows are safe and the counters reseed
    from the database."""

    __slots__ = ("_spend", "_count")

    def __init__(self, spend: SpendCounter, metrics: Metrics) -> None:
        self._spend = spend
        self._count = metrics.usage

    async def __call__(self, rows: Sequence[dict[str, Any]], amounts: Amounts | None) -> None:
        """Count `rows` and add `amounts` (their `spend_amounts`; None or empty: no spend)."""
        count = self._count
        for row in rows:
            count(row["model"], row["prompt_tokens"], row["completion_tokens"], row["cached_prompt_tokens"],
                  row["cost_usd"])
        if amounts:
            try:
                await self._spend.add(amounts)
            except Exception as exc:  # the rows are safe; counters reseed from the database
                log.warning("spend counter update failed: %s", exc)


class UsageRecorder(Protocol):
    """What callers need of a usage writer (the group commit's, or a journal's)."""

    metered_calls: MeteredCalls  # counted by the call stage

    @property
    def pending(self) -> int:
        """Rows not committed yet."""

    def start(self) -> None:
        """Start on the running loop."""

    def record(self, usage: Usage) -> Awaitable[None]:
        """Awaited: returns once the row is durable and its `AfterCommit` step is done."""

    async def settle(self) -> None:
        """Make every durable row visible to a read of the tables."""

    async def close(self) -> None:
        """Write what is waiting and stop."""

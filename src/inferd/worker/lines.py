"""One batch line through the chat corridor: validation, model resolution and the org's
allow-list, the key's budget, pacing, the call stage (failover) with retries, half-price usage.

Pacing (`[batches] max_concurrency` lines in flight per deployment) has two
parts. The call stage holds each attempt to a free slot of the worker's `Pacer` on the deployment
it is sent to, whatever the routing (weights, affinity), failover or fallbacks choose. Before
that, lines wait for their model's share (`max_concurrency` per deployment of its pool) here,
before the cancel and budget checks, so a line that waited long still sees a cancel or a spent
budget; only a line that fails over onto a full deployment waits inside the stage.

The usage row is not committed here: the call stage hands it back as a value (`record=False`) and
it travels with the line's result so both are recorded in one transaction (store/batches.py),
which is what makes a crash lose both or neither.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from typing import Any, Callable

import orjson

from inferd.auth.key_record import KeyRecord
from inferd.calls.pacing import Pacer
from inferd.calls.stage import Metered
from inferd.catalogue import Model
from inferd.config import BatchConfig
from inferd.errors import AuthenticationFailed, BudgetExceeded, InferdError, InvalidRequest, RelayedError
from inferd.limits.base import Limits, budget_message
from inferd.metering.usage import Usage
from inferd.protocol.chat import check_chat
from inferd.protocol.checks import check_metadata
from inferd.services.batches import error_line, new_request_id
from inferd.services.chat import ChatService
from inferd.services.chat_call import ChatCall
from inferd.store.batches import LineResult

PRICE_FACTOR = 0.5  # batch lines cost half the model's token rates
RETRIES = 3  # transient engine failures (429, 5xx, timeout) retried this often
RETRY_BASE_SECONDS = 0.5

def _transient(exc: InferdError) -> bool:
    return exc.status == 429 or exc.status >= 500


def _relayed_message(exc: InferdError) -> str:
    if isinstance(exc, RelayedError):
        try:
            error = orjson.loads(exc.body()).get("error") or {}
            return str(error.get("message") or exc.message)
        except (orjson.JSONDecodeError, AttributeError):
            return exc.message
    return exc.message


class LineRunner:
    """Runs lines; deployments are paced by `[batches] max_concurrency` lines in flight each."""

    def __init__(self, chat: ChatService, limits: Limits, config: BatchConfig) -> None:
        self._chat = chat
        self._limits = limits
        self._config = config
        self._paces: dict[str, asyncio.Semaphore] = {}
        self._pacer = Pacer(config.max_concurrency)
        # Cost of lines finished but not yet committed, per charged key: the budget counts it.
        self.unrecorded: dict[str, float] = {}
        self.retry_base = RETRY_BASE_SECONDS

    def _pace(self, model: Model) -> asyncio.Semaphore:
        """Lines of a model past their checks: `max_concurrency` per deployment of its pool (each
        deployment's own cap is the pacer's)."""
        pace = self._paces.get(model.id)
        if pace is None:
            pace = self._paces[model.id] = asyncio.Semaphore(self._config.max_concurrency * len(model.deployments))
        return pace

    def settle(self, results: list[LineResult]) -> None:
        """These results are committed (or dropped): their cost now counts through the spend counter."""
        for result in results:
            row = result.usage_row
            if row is not None and row["cost_usd"]:
                self.unrecorded[row["key_id"]] = self.unrecorded.get(row["key_id"], 0.0) - row["cost_usd"]

    async def _budget_left(self, key: KeyRecord) -> None:
        # Lines finished but not committed count against every budget of their key (they are all
        # charged to it; its team and org may have spent more elsewhere, which the counter holds).
        unrecorded = self.unrecorded.get(key.charged_key_id, 0.0)
        for budget in key.budgets:
            if await self._limits.spend.current(budget) + unrecorded >= budget.usd:
                raise BudgetExceeded(budget_message(budget))

    async def _window_slot(self, key: KeyRecord, may_start: Callable[[], bool]) -> bool:
        """Count the line in its key's and team's windows, waiting (not failing: a batch has a day)
        while they are full; False when it must not start any more meanwhile."""
        while key.windows:
            wait, _ = await self._limits.rate.admit(key.windows)
            if wait is None:
                return True
            if not may_start():
                return False
            await asyncio.sleep(min(wait, 5))
        return True

    async def run(self, line_no: int, custom_id: str, body_text: str, key: KeyRecord | None,
                  may_start: Callable[[], bool]) -> LineResult | None:
        """The line's result, or None when it must not start any more (cancel, expiry)."""
        try:
            if key is None or key.revoked:
                raise AuthenticationFailed("The batch's API key was revoked", code="key_revoked")
            body: Any = orjson.loads(body_text)
            body.pop("stream", None)  # batch lines are always blocking
            body.pop("stream_options", None)
            check_chat(body)
            metadata = check_metadata(body.get("metadata"))
            call = self._chat.open(body, key, workspace="batch", price_factor=PRICE_FACTOR, metadata=metadata)
            if not await self._window_slot(key, may_start):
                return None
            async with self._pace(call.model):
                if not may_start():
                    return None
                await self._budget_left(key)
                await self._chat.fit_context(call)
                answered = await self._attempts(call)
        except InferdError as exc:
            usage = exc.usage if isinstance(exc.usage, Usage) else None  # a failed call that reached the engine
            self._unrecorded_cost(usage)
            return LineResult(line_no, "failed", error_line(custom_id, exc.code if isinstance(exc.code, str)
                                                            else str(exc.code), _relayed_message(exc), exc.status),
                              usage.row() if usage else None)
        except (orjson.JSONDecodeError, AttributeError, TypeError) as exc:
            error = InvalidRequest(f"The line's body is not a chat-completion request: {exc}")
            return LineResult(line_no, "failed", error_line(custom_id, error.code, error.message, 400), None)
        self._unrecorded_cost(answered.usage)
        response = {"status_code": 200, "request_id": "req_" + secrets.token_hex(12), "body": answered.value}
        line = orjson.dumps({"id": new_request_id(), "custom_id": custom_id, "response": response, "error": None})
        return LineResult(line_no, "succeeded", line, answered.usage.row())

    def _unrecorded_cost(self, usage: Usage | None) -> None:
        if usage is not None and usage.cost_usd:
            self.unrecorded[usage.key_id] = self.unrecorded.get(usage.key_id, 0.0) + usage.cost_usd

    async def _attempts(self, call: ChatCall) -> Metered[dict[str, Any]]:
        """The line's completion, retried on transient failures after the call
        stage's own failover; only the attempt that decides the line is billed."""
        for attempt in range(RETRIES + 1):
            try:
                return await self._chat.complete(call, record=False, pacer=self._pacer)
            except InferdError as exc:
                if attempt == RETRIES or not _transient(exc):
                    raise
                delay = self.retry_base * 2 ** attempt
                await asyncio.sleep(delay * (0.75 + random.random() / 2))
        raise AssertionError("unreachable")

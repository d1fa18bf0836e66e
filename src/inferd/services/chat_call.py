"""One chat request on its way through the corridor (`ChatCall`), and what the service and its
stream relay both read of the wire: the stream's last frame, a reply's text fields, its usage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferd.auth.key_record import KeyRecord
from inferd.cache.service import Ticket
from inferd.cache.store import Entry
from inferd.calls.stage import Billing
from inferd.catalogue import Deployment, Model
from inferd.guardrails.policy import Policy

CLIENT_CLOSED = 499  # status on the usage row of a stream the client abandoned
# The text of a reply the output guardrails read: the answer and the reasoning, in either name.
TEXT_FIELDS = ("content", "reasoning_content", "reasoning")
DONE_FRAME = b"data: [DONE]\n\n"  # a stream's last SSE frame


@dataclass(slots=True)
class ChatCall:
    """One chat request on its way through the corridor."""

    key: KeyRecord
    model: Model
    payload: dict[str, Any]  # the body sent upstream (`model`: the first deployment's; `payload_for` each)
    metadata: dict[str, str] | None
    workspace: str = "chat"
    price_factor: float = 1.0
    prompt_count: int | None = None
    affinity: str | None = None  # the routing key of `affinity` pools
    guard: Policy | None = None  # the guardrails of the caller's org; None: none apply
    guarded: bool = False  # whether the input guardrails have run (they run once, before any engine)
    cache: Ticket | None = None  # the response cache's ticket (routes that cache, with the cache on)
    hit: Entry | None = None  # the entry that answers the call, found before any engine

    @property
    def billing(self) -> Billing:
        """Who pays, in which workspace, at which rate."""
        return Billing(self.key, self.workspace, self.price_factor, self.metadata)

    def payload_for(self, deployment: Deployment) -> dict[str, Any]:
        """The upstream body for one deployment: its own upstream model name (`payload` itself when
        it already names it, as it does for the first deployment: no copy on the hot path)."""
        name = deployment.upstream
        return self.payload if self.payload.get("model") == name else {**self.payload, "model": name}


def usage_numbers(usage: Any) -> tuple[int, int, int] | None:
    """(prompt, completion, cached prompt) tokens of an engine's `usage`; None when it has none."""
    if not isinstance(usage, dict):
        return None
    try:
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details")
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    except (TypeError, ValueError):
        return None
    return prompt, completion, cached


def with_reasoning(holder: dict[str, Any]) -> None:
    """Expose an engine's `reasoning_content` as the spec's `reasoning`."""
    if "reasoning_content" in holder and holder.get("reasoning") is None:
        holder["reasoning"] = holder["reasoning_content"]

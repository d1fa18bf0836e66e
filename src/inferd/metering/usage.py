"""What one metered call used and who pays for it: the usage row of a call, priced from the
catalogue."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from inferd.auth.key_record import KeyRecord
from inferd.config_models import Cost, ModelConfig
from inferd.store.db import utcnow


def token_cost(cost: Cost | None, prompt_tokens: int, completion_tokens: int, factor: float = 1.0) -> float:
    """USD for a call: tokens priced per million at the model's rates, times `factor` (batches: 0.5)."""
    if cost is None:
        return 0.0
    return factor * (prompt_tokens * cost.input_per_m_token + completion_tokens * cost.output_per_m_token) / 1e6


@dataclass
class Usage:
    """What one metered call used and who pays for it."""

    org: str
    deployment: str
    key_id: str
    user_id: str | None
    model: str
    workspace: str
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    latency_ms: int
    status_code: int
    cost_usd: float
    metadata: dict[str, str] | None
    team_id: int | None = None
    guardrail: str | None = None  # the output guardrail that withheld the reply (the engine was reached)
    cache_hit: bool = False  # answered from the response cache: cost 0, `saved_usd` what it first cost
    saved_usd: float = 0.0

    def row(self) -> dict[str, Any]:
        """The `usage_rows` values for this call."""
        created_at = utcnow()
        return {
            "org": self.org, "deployment": self.deployment, "key_id": self.key_id, "user_id": self.user_id,
            "team_id": self.team_id, "model": self.model, "workspace": self.workspace,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens, "latency_ms": self.latency_ms,
            "status_code": self.status_code, "cost_usd": self.cost_usd, "created_at": created_at,
            "metadata": orjson.dumps(self.metadata).decode() if self.metadata else None,
            "guardrail": self.guardrail, "cache_hit": self.cache_hit, "saved_usd": self.saved_usd,
        }


def usage_for(key: KeyRecord, config: ModelConfig, workspace: str, status: int, prompt: int, completion: int, *,
              started: float, cached: int = 0, metadata: dict[str, str] | None = None,
              price_factor: float = 1.0, cost_usd: float | None = None, guardrail: str | None = None) -> Usage:
    """The usage of one call of `key` on the deployment `config`, priced from the catalogue
    (per token, unless `cost_usd` gives the price, as images do per generation); `guardrail`: the
    output guardrail that blocked the reply."""
    return Usage(org=key.org_slug, team_id=key.team_id, deployment=config.deployment_name, key_id=key.charged_key_id,
                 user_id=str(key.user_id) if key.user_id is not None else None, model=config.id,
                 workspace=workspace, prompt_tokens=prompt, completion_tokens=completion,
                 cached_prompt_tokens=cached if config.prefix_cache else 0,
                 latency_ms=int((time.perf_counter() - started) * 1000), status_code=status,
                 cost_usd=token_cost(config.cost, prompt, completion, price_factor) if cost_usd is None else cost_usd,
                 metadata=metadata, guardrail=guardrail)

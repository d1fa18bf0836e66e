"""Wire schemas of GET /v1/usage and GET /v1/usage/summary (the spec's UsageRow and summary row)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class UsageRow(BaseModel):
    id: int
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
    created_at: str  # RFC 3339, UTC
    team_id: int | None
    team: str | None  # the team's name (issue 28); null with no team
    metadata: dict[str, str] | None
    guardrail: str | None  # the output guardrail that withheld the reply; null otherwise
    cache_hit: bool  # answered from the response cache: cost_usd 0, the tokens as first billed
    saved_usd: float  # on a cache hit, what the answer first cost; else 0


class UsagePagination(BaseModel):
    limit: int
    offset: int
    has_more: bool
    from_: str = Field(alias="from")  # RFC 3339, UTC
    to: str

    model_config = ConfigDict(populate_by_name=True)


class UsageSummaryRow(BaseModel):
    group_value: str | None
    requests: int
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float
    cache_hits: int  # requests answered from the response cache
    saved_usd: float  # what those answers first cost


class UsagePage(BaseModel):
    success: bool
    data: list[UsageRow]
    pagination: UsagePagination


class UsageSummary(BaseModel):
    success: bool
    group_by: str
    data: list[UsageSummaryRow]
    pagination: UsagePagination

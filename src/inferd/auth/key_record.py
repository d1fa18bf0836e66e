"""The caller's key as every stage sees it: `KeyRecord`, a key joined with its org, its team and,
for a user key, the key it is charged to; assembled from one row of `KEY_LOOKUP`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from inferd.store.db import as_datetime, utcnow
from inferd.store.key_limits import DEFAULT_PERIOD, Budget, Window, decode_model_limits, decode_models
from inferd.store.orgs import decode_allowed, decode_guardrails, effective_models


@dataclass(frozen=True)
class KeyRecord:
    """A key joined with its org, its team and, for user keys, the key it is charged to."""

    id: int
    access_key_id: str
    secret_hash: str
    type: str
    org_id: int
    org_slug: str
    allowed_models: tuple[str, ...] | None  # the org's (the operator's ceiling, narrowed by its admin)
    user_id: int | None
    revoked: bool
    expires_at: datetime | None
    charged_key_id: str  # the key whose budget pays (the parent for user keys)
    budget_usd: float | None
    rpm: int | None
    # The requests-per-minute window this key counts against: its own for a long-lived key; for a
    # user key, one per (parent key, user), so minting more keys never multiplies a user's rate.
    rate_window: str
    team_id: int | None = None  # the charged key's team
    team_name: str | None = None
    tpm: int | None = None
    team_models: tuple[str, ...] | None = None
    key_models: tuple[str, ...] | None = None
    budgets: tuple[Budget, ...] = ()  # every budget a metered call falls under: key, team, org
    windows: tuple[Window, ...] = ()  # every window a call counts in: key, team (those with a limit)
    model_windows: tuple[Window, ...] = ()  # per-model windows of the key and its team
    token_windows: tuple[Window, ...] = ()  # the windows (of `windows`) with a tpm: a call's tokens count there
    previous_secret_hash: str | None = None  # a rotated key's old secret, valid until previous_secret_until
    previous_secret_until: datetime | None = None
    org_guardrails: tuple[str, ...] = ()  # the `[[guardrails]]` the org chose (besides those for every org)


# One key by its access key id ({param}: the driver's placeholder); `key_record` reads its columns in order.
KEY_LOOKUP = """
SELECT k.id, k.access_key_id, k.secret_hash, k.type, k.org_id, o.slug, o.allowed_models, o.admin_models,
       o.budget_usd, o.budget_period, k.user_id, k.revoked_at, k.expires_at,
       k.budget_usd, k.rpm, k.tpm, k.budget_period, k.models, k.model_limits, k.previous_secret_hash,
       k.previous_secret_until,
       p.access_key_id, p.budget_usd, p.rpm, p.revoked_at, p.expires_at, p.tpm, p.budget_period, p.models,
       p.model_limits,
       t.id, t.name, t.budget_usd, t.budget_period, t.rpm, t.tpm, t.models, t.model_limits, o.guardrails
FROM api_keys k JOIN orgs o ON o.id = k.org_id LEFT JOIN api_keys p ON p.id = k.parent_key_id
LEFT JOIN teams t ON t.id = COALESCE(p.team_id, k.team_id)
WHERE k.access_key_id = {param}
"""


def _model_windows(scope: str, owner: str, stored: str | None) -> list[Window]:
    return [Window(scope, f"{owner}/model/{model}", limits.get("rpm"), limits.get("tpm"), model)
            for model, limits in decode_model_limits(stored).items()]


def key_record(row: tuple[Any, ...]) -> KeyRecord:
    """The record of one row of `KEY_LOOKUP`."""
    (key_id, access_key_id, secret_hash, key_type, org_id, slug, allowed, admin_models, org_budget, org_period,
     user_id, revoked_at, expires_at, budget, rpm, tpm, period, models, model_limits, previous_hash, previous_until,
     parent_access, parent_budget, parent_rpm, parent_revoked, parent_expires, parent_tpm, parent_period,
     parent_models, parent_model_limits,
     team_id, team_name, team_budget, team_period, team_rpm, team_tpm, team_models, team_model_limits,
     org_guardrails) = row
    has_parent = parent_access is not None
    if has_parent:
        budget, rpm, tpm, period, models, model_limits = (parent_budget, parent_rpm, parent_tpm, parent_period,
                                                          parent_models, parent_model_limits)
    charged = parent_access if has_parent else access_key_id
    rate_window = f"{parent_access}/user/{user_id}" if has_parent else access_key_id
    budgets = []
    if budget is not None:
        budgets.append(Budget("key", charged, charged, float(budget), period or DEFAULT_PERIOD))
    windows = []
    if rpm is not None or tpm is not None:
        windows.append(Window("key", rate_window, rpm, tpm))
    model_windows = _model_windows("key", rate_window, model_limits)
    if team_id is not None:
        if team_budget is not None:
            budgets.append(Budget("team", str(team_id), team_name, float(team_budget), team_period or DEFAULT_PERIOD))
        if team_rpm is not None or team_tpm is not None:
            windows.append(Window("team", f"team:{team_id}", team_rpm, team_tpm))
        model_windows += _model_windows("team", f"team:{team_id}", team_model_limits)
    if org_budget is not None:
        budgets.append(Budget("org", slug, slug, float(org_budget), org_period or DEFAULT_PERIOD))
    expired_parent = has_parent and parent_expires is not None and as_datetime(parent_expires) <= utcnow()
    return KeyRecord(
        id=key_id, access_key_id=access_key_id, secret_hash=secret_hash, type=key_type, org_id=org_id,
        org_slug=slug, allowed_models=effective_models(decode_allowed(allowed), decode_models(admin_models)),
        user_id=user_id,
        revoked=revoked_at is not None or (has_parent and parent_revoked is not None) or bool(expired_parent),
        expires_at=as_datetime(expires_at), charged_key_id=charged, budget_usd=budget, rpm=rpm, rate_window=rate_window,
        team_id=team_id, team_name=team_name, tpm=tpm, team_models=decode_models(team_models),
        key_models=decode_models(models), budgets=tuple(budgets), windows=tuple(windows),
        token_windows=tuple(window for window in windows if window.tpm is not None),
        model_windows=tuple(model_windows), previous_secret_hash=previous_hash,
        previous_secret_until=as_datetime(previous_until), org_guardrails=decode_guardrails(org_guardrails),
    )

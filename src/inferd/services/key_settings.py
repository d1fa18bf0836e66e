"""A key's governance settings as an admin or the operator gives them,
checked and turned into what `KeyRepository.create` and `update` store.

Everything is checked before anything is written, so a refused change writes nothing: an unknown
team is 404 `team_not_found`, models wider than the key's team or org allow 400
`model_not_allowed`, a malformed period or duration 400.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.errors import InvalidRequest, NotFound
from inferd.limits.periods import parse_duration, parse_period, window_of
from inferd.services.model_lists import NamesOf, check_within, known, model_limits
from inferd.store.db import iso, utcnow
from inferd.store.orgs import Org
from inferd.store.teams import Team, TeamRepository

PLAIN = ("name", "budget_usd", "rpm", "tpm")  # stored as given


def period_fields(period: str) -> dict[str, str | None]:
    """`period_start` and `resets_at` (YYYY-MM-DD, UTC) of a budget period under way; null for `total`."""
    start, end = window_of(period)
    return {"period_start": start.isoformat() if start else None, "resets_at": end.isoformat() if end else None}


def utc_naive(moment: datetime | None) -> datetime | None:
    """A client's RFC 3339 time as the naive UTC datetime the tables store (no offset: UTC)."""
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(timezone.utc).replace(tzinfo=None)


def shown_settings(given: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """Decision 23's settings of a new key as its `key.create` audit entry shows them (those set)."""
    shown = {name: given[name] for name in ("team", "tpm", "budget_period", "models", "model_limits")
             if given.get(name) is not None}
    if changes.get("expires_at") is not None:
        shown["expires_at"] = iso(changes["expires_at"])
    return shown


def period(value: str | None, param: str = "budget_period") -> str | None:
    """A budget period (None: the default, month); 400 when it is none of day, week, month, total."""
    if value is None:
        return None
    try:
        return parse_period(value)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param=param, code="invalid_period") from None


def expiry(expires_in: str) -> datetime:
    """When a key given `expires_in` (`30d`, `12h`, `15m`, `45s`) from now expires; 400 when malformed."""
    try:
        seconds = parse_duration(expires_in)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="expires_in", code="invalid_duration") from None
    if seconds <= 0:
        raise InvalidRequest("expires_in: must be longer than 0 s", param="expires_in", code="invalid_duration")
    return utcnow() + timedelta(seconds=seconds)


async def team_named(teams: TeamRepository, org: Org, name: str) -> Team:
    """The org's team of this name; 404 `team_not_found` otherwise."""
    team = await teams.get(org.id, name)
    if team is None:
        raise NotFound(f"No team '{name}' in organisation '{org.slug}'", code="team_not_found", param="team")
    return team


async def key_changes(teams: TeamRepository, org: Org, given: Mapping[str, Any], names_of: NamesOf,
                      current_team: str | None = None,
                      current_models: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The store's changes (KEY_SETTINGS) for `given`: any of name, budget_usd, rpm, tpm,
    budget_period, team (a name, None: no team), models (a list, None: what the team and org
    allow), expires_in (a duration) or expires_at (a naive UTC datetime, None: never). The key's
    models, given or kept (`current_models`), must stay within its team's, given or kept
    (`current_team`), and its org's."""
    if "expires_in" in given and "expires_at" in given:
        raise InvalidRequest("give expires_in or expires_at, not both", param="expires_in")
    changes = {name: given[name] for name in PLAIN if name in given}
    if "budget_period" in given:
        changes["budget_period"] = period(given["budget_period"])
    if given.get("expires_in") is not None:
        changes["expires_at"] = expiry(given["expires_in"])
    elif "expires_in" in given or "expires_at" in given:
        changes["expires_at"] = given.get("expires_at")
    if "model_limits" in given:
        changes["model_limits"] = model_limits(given["model_limits"], names_of)
    models = current_models
    if "models" in given:
        models = changes["models"] = None if given["models"] is None else known(given["models"], names_of)
    team_name = given["team"] if "team" in given else current_team
    team = await team_named(teams, org, team_name) if team_name is not None else None
    if "team" in given:
        changes["team_id"] = team.id if team is not None else None
    if "models" in given or "team" in given:
        ceilings = [(f"organisation '{org.slug}'", org.models)]
        if team is not None:
            ceilings.insert(0, (f"team '{team.name}'", team.models))
        check_within(models, ceilings, names_of)
    return changes

"""Teams of one org, administered by its admin key: list, create, read,
change and delete, each change audited and obeyed from the next request on every replica
(store/teams.py). A team of another org is 404, as an unknown one."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

from inferd.auth.key_record import KeyRecord
from inferd.catalogue import ModelCatalogue
from inferd.errors import NotFound
from inferd.limits.periods import since
from inferd.services.key_settings import period, period_fields
from inferd.services.model_lists import NamesOf, check_within, known, model_limits, names_in
from inferd.store.orgs import Org, OrgRepository
from inferd.store.teams import TEAM_SETTINGS, Team, TeamRepository


def team_object(team: Team, spend_usd: float) -> dict[str, Any]:
    """The wire form of a team."""
    return {"name": team.name, "budget_usd": team.budget_usd, "budget_period": team.budget_period,
            "rpm": team.rpm, "tpm": team.tpm, "models": list(team.models) if team.models is not None else None,
            "model_limits": team.model_limits,
            "spend_usd": round(spend_usd, 10), **period_fields(team.budget_period)}


def team_settings(org: Org, given: Mapping[str, Any], names_of: NamesOf) -> dict[str, Any]:
    """The store's settings (TEAM_SETTINGS) for `given`: a period of day, week, month or total (None:
    month), models known to the catalogue and within the org's (400 otherwise)."""
    settings = {name: given[name] for name in TEAM_SETTINGS if name in given}
    if "budget_period" in settings:
        settings["budget_period"] = period(settings["budget_period"])
    if "model_limits" in given:
        settings["model_limits"] = model_limits(given["model_limits"], names_of)
    if settings.get("models") is not None:
        settings["models"] = known(settings["models"], names_of)
        check_within(settings["models"], [(f"organisation '{org.slug}'", org.models)], names_of)
    return settings


class TeamAdministration:
    """What an admin key may do with its own org's teams."""

    def __init__(self, teams: TeamRepository, orgs: OrgRepository, catalogue: ModelCatalogue,
                 settle_usage: Callable[[], Awaitable[None]]) -> None:
        self._teams = teams
        self._orgs = orgs
        self._names_of = names_in(model.config for model in catalogue.models)
        self._settle_usage = settle_usage  # before a read of spend: rows still in a journal count

    async def list(self, admin: KeyRecord) -> list[dict[str, Any]]:
        """The org's teams by name, each with its spend in its budget's period under way."""
        await self._settle_usage()
        listed = await self._teams.list(admin.org_id)
        spent = await self._teams.spend(listed, since)
        return [team_object(team, spent.get(team.id, 0.0)) for team in listed]

    async def get(self, admin: KeyRecord, name: str) -> dict[str, Any]:
        """One team of the org (404 `team_not_found` otherwise)."""
        await self._settle_usage()
        team = await self._teams.get(admin.org_id, name)
        if team is None:
            raise _not_found(name)
        return team_object(team, (await self._teams.spend([team], since)).get(team.id, 0.0))

    async def create(self, admin: KeyRecord, name: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """A new team (409 `team_exists` when the name is taken)."""
        settings = team_settings(await self._org(admin), given, self._names_of)
        await self._teams.create(admin.org_id, name, settings, admin.access_key_id)
        return await self.get(admin, name)

    async def update(self, admin: KeyRecord, name: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """Change some of a team's settings (null removes a limit)."""
        settings = team_settings(await self._org(admin), given, self._names_of)
        if await self._teams.update(admin.org_id, name, settings, admin.access_key_id) is None:
            raise _not_found(name)
        return await self.get(admin, name)

    async def delete(self, admin: KeyRecord, name: str) -> dict[str, Any]:
        """Delete a team no live key belongs to (409 `team_in_use` otherwise)."""
        if await self._teams.delete(admin.org_id, name, admin.access_key_id) is None:
            raise _not_found(name)
        return {"name": name, "deleted": True}

    async def _org(self, admin: KeyRecord) -> Org:
        org = await self._orgs.get(admin.org_id)
        if org is None:  # the key's org row is gone: nothing to administer
            raise NotFound("Your organisation no longer exists", code="org_not_found")
        return org


def _not_found(name: str) -> NotFound:
    return NotFound(f"No team '{name}' in your organisation", code="team_not_found")

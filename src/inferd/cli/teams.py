"""`inferd teams create|update ORG/TEAM …`, `inferd teams list ORG` and `inferd teams delete ORG/TEAM`,
recorded in the org's audit log (`team.create`, `team.update`,
`team.delete`) with the actor `cli`. Running servers obey a change from the next request."""

from __future__ import annotations

import json
from typing import Any

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.cli.common import run_with_db, settings_from_env
from inferd.cli.governance import (PERIOD, PERIOD_HELP, catalogue_names, merged_model_limits, model_limit_changes,
                                   model_list, org_team, refusals)
from inferd.cli.keys import model_limit_options
from inferd.limits.periods import since
from inferd.services.admin_teams import team_object, team_settings
from inferd.services.model_lists import NamesOf
from inferd.store.audit import CLI_ACTOR
from inferd.store.keys import KeyRepository
from inferd.store.orgs import Org, OrgRepository
from inferd.store.teams import TeamRepository


async def _org(engine: AsyncEngine, slug: str) -> Org:
    org = await OrgRepository(engine).get_by_slug(slug)
    if org is None:
        raise click.ClickException(f"no org {slug!r}")
    return org


def _teams(engine: AsyncEngine) -> TeamRepository:
    return TeamRepository(engine, KeyRepository(engine))


def _names(models: str | None) -> NamesOf:
    """The catalogue's names when models are given (else never asked)."""
    return catalogue_names(settings_from_env()) if models is not None else (lambda name: None)


@click.group()
def teams() -> None:
    """Manage an organisation's teams: budgets, rate limits and models shared by their keys."""


def _limits(command: Any) -> Any:
    """The options create and update share."""
    for option in reversed((
            click.option("--budget-usd", type=click.FloatRange(min=0), default=None, help="Budget in USD."),
            click.option("--budget-period", type=PERIOD, default=None, help=PERIOD_HELP),
            click.option("--rpm", type=click.IntRange(min=1, max=2**31 - 1), default=None, help="Requests per minute."),
            click.option("--tpm", type=click.IntRange(min=1, max=2**31 - 1), default=None, help="Tokens per minute."),
            click.option("--models", default=None,
                         help="Model ids or aliases, comma-separated, within the org's (default: the org's)."))):
        command = option(command)
    return command


@teams.command("create")
@click.argument("org_and_team", metavar="ORG/TEAM")
@_limits
def create(org_and_team: str, budget_usd: float | None, budget_period: str | None, rpm: int | None,
           tpm: int | None, models: str | None) -> None:
    """Create a team in an existing org."""
    slug, name = org_team(org_and_team)
    given: dict[str, Any] = {"budget_usd": budget_usd, "budget_period": budget_period, "rpm": rpm, "tpm": tpm,
                             "models": model_list(models) if models is not None else None}
    names_of = _names(models)

    async def work(engine: AsyncEngine) -> None:
        org = await _org(engine, slug)
        settings = {k: v for k, v in team_settings(org, given, names_of).items() if v is not None}
        await _teams(engine).create(org.id, name, settings, CLI_ACTOR)

    with refusals():
        run_with_db(settings_from_env(), work)
    click.echo(f"created team {name} in org {slug}")


@teams.command("update")
@click.argument("org_and_team", metavar="ORG/TEAM")
@_limits
@click.option("--no-budget", is_flag=True, help="Remove the budget.")
@click.option("--no-rpm", is_flag=True, help="Remove the requests-per-minute limit.")
@click.option("--no-tpm", is_flag=True, help="Remove the tokens-per-minute limit.")
@click.option("--no-models", is_flag=True, help="Allow every model the org allows.")
@model_limit_options("team")
def update(org_and_team: str, budget_usd: float | None, budget_period: str | None, rpm: int | None,
           tpm: int | None, models: str | None, no_budget: bool, no_rpm: bool, no_tpm: bool, no_models: bool,
           model_limit: tuple[str, ...], no_model_limit: tuple[str, ...]) -> None:
    """Change a team's budget, period, rate limits or models; running servers obey it from the next request."""
    slug, name = org_team(org_and_team)
    given: dict[str, Any] = {}
    for key, value, remove in (("budget_usd", budget_usd, no_budget), ("rpm", rpm, no_rpm), ("tpm", tpm, no_tpm),
                               ("models", models, no_models)):
        if value is not None and remove:
            raise click.UsageError("give a new limit or remove it, not both")
        if value is not None or remove:
            given[key] = model_list(value) if key == "models" and value is not None else value
    if budget_period is not None:
        given["budget_period"] = budget_period
    limits_given = model_limit_changes(model_limit, no_model_limit)
    if not given and limits_given is None:
        raise click.UsageError("nothing to change: give --budget-usd, --budget-period, --rpm, --tpm, --models, "
                               "--model-limit or one of --no-budget, --no-rpm, --no-tpm, --no-models")
    names_of = _names(models if limits_given is None else "")

    async def work(engine: AsyncEngine) -> bool:
        org = await _org(engine, slug)
        repo = _teams(engine)
        if limits_given is not None:
            team = await repo.get(org.id, name)
            if team is None:
                return False
            given["model_limits"] = merged_model_limits(team.model_limits, limits_given, names_of)
        return await repo.update(org.id, name, team_settings(org, given, names_of), CLI_ACTOR) is not None

    with refusals():
        if not run_with_db(settings_from_env(), work):
            raise click.ClickException(f"no team {name!r} in org {slug!r}")
    click.echo(f"updated team {name} in org {slug}: " + ", ".join(f"{k}={v}" for k, v in given.items()))


@teams.command("list")
@click.argument("slug", metavar="ORG")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per team, one per line.")
def list_(slug: str, as_json: bool) -> None:
    """An org's teams with their limits and spend in their budget's period under way."""

    async def work(engine: AsyncEngine) -> list[dict[str, Any]]:
        org = await _org(engine, slug)
        repo = _teams(engine)
        listed = await repo.list(org.id)
        spent = await repo.spend(listed, since)
        return [team_object(team, spent.get(team.id, 0.0)) for team in listed]

    for team in run_with_db(settings_from_env(), work):
        if as_json:
            click.echo(json.dumps(team))
        else:
            models = ",".join(team["models"]) if team["models"] is not None else "(the org's)"
            click.echo(f"{team['name']}: budget {team['budget_usd']} per {team['budget_period']} (spent "
                       f"{team['spend_usd']:g}), rpm {team['rpm']}, tpm {team['tpm']}, models {models}")


@teams.command("delete")
@click.argument("org_and_team", metavar="ORG/TEAM")
def delete(org_and_team: str) -> None:
    """Delete a team; refused while a live key belongs to it (move or revoke those first)."""
    slug, name = org_team(org_and_team)

    async def work(engine: AsyncEngine) -> bool:
        org = await _org(engine, slug)
        return await _teams(engine).delete(org.id, name, CLI_ACTOR) is not None

    with refusals():
        if not run_with_db(settings_from_env(), work):
            raise click.ClickException(f"no team {name!r} in org {slug!r}")
    click.echo(f"deleted team {name} of org {slug}")

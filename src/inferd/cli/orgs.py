"""`inferd orgs create SLUG [--models ID,ID|*] [--no-file-attachments] [--web-search] [--budget-usd X
--budget-period P] [--guardrails NAME,NAME]` and `inferd orgs update SLUG …` (recorded in the org's audit log, `org.create`
and `org.update`, with the actor `cli`). The org's models and budget set here are the operator's
ceilings: its admin may narrow the models, never widen them nor touch the budget."""

from __future__ import annotations

from typing import Any

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.cli.common import run_with_db, settings_from_env
from inferd.cli.governance import PERIOD, PERIOD_HELP, guardrail_names
from inferd.store.audit import CLI_ACTOR, AuditEntry, AuditLog
from inferd.store.keys import KeyRepository
from inferd.store.orgs import Org, OrgRepository, models_setting, update_settings


GUARDRAILS_HELP = ("Guardrails of the configuration file's [[guardrails]] the org's calls go through, "
                   "comma-separated (besides those whose applies_to names every org or this one).")


def _allow_list(models: str) -> tuple[str, ...] | None:
    return None if models.strip() == "*" else tuple(m.strip() for m in models.split(",") if m.strip())


async def record_creation(engine: AsyncEngine, org: Org, actor: str = CLI_ACTOR) -> None:
    """The org's first audit entry: `org.create` with the settings it was created with (written
    right after the org, whose store commits it on its own)."""
    details = {"models": models_setting(org.allowed_models), "file_attachments": org.file_attachments,
               "web_search": org.web_search}
    if org.guardrails:
        details["guardrails"] = list(org.guardrails)
    if org.budget_usd is not None:
        details.update(budget_usd=org.budget_usd, budget_period=org.budget_period)
    await AuditLog(engine).record(org.id, AuditEntry(actor, "org.create", org.slug, details))


@click.group()
def orgs() -> None:
    """Manage organisations."""


@orgs.command("create")
@click.argument("slug")
@click.option("--models", default="*", show_default=True, help="Allowed model ids or aliases, comma-separated, or *.")
@click.option("--no-file-attachments", is_flag=True, help="Disable file attachments for the org.")
@click.option("--web-search", is_flag=True, help="Enable web search for the org.")
@click.option("--budget-usd", type=click.FloatRange(min=0), default=None, help="A budget in USD for the whole org.")
@click.option("--budget-period", type=PERIOD, default="month", show_default=True, help=PERIOD_HELP)
@click.option("--guardrails", default="", help=GUARDRAILS_HELP)
def create(slug: str, models: str, no_file_attachments: bool, web_search: bool, budget_usd: float | None,
           budget_period: str, guardrails: str) -> None:
    """Create an organisation."""
    allowed = _allow_list(models)
    chosen = guardrail_names(settings_from_env(), guardrails)

    async def work(engine: AsyncEngine) -> Org:
        repo = OrgRepository(engine)
        if await repo.get_by_slug(slug) is not None:
            raise click.ClickException(f"org {slug!r} already exists")
        org = await repo.create(slug, allowed, file_attachments=not no_file_attachments, web_search=web_search,
                                budget_usd=budget_usd, budget_period=budget_period, guardrails=chosen)
        await record_creation(engine, org)
        return org

    org = run_with_db(settings_from_env(), work)
    click.echo(f"created org {org.slug} (id {org.id}), models: {models}")


@orgs.command("update")
@click.argument("slug")
@click.option("--models", default=None, help="Allowed model ids or aliases, comma-separated, or *.")
@click.option("--file-attachments/--no-file-attachments", default=None, help="Enable or disable file attachments.")
@click.option("--web-search/--no-web-search", default=None, help="Enable or disable web search.")
@click.option("--budget-usd", type=click.FloatRange(min=0), default=None, help="A budget in USD for the whole org.")
@click.option("--budget-period", type=PERIOD, default=None, help=PERIOD_HELP)
@click.option("--no-budget", is_flag=True, help="Remove the org's budget.")
@click.option("--guardrails", default=None, help=GUARDRAILS_HELP + " An empty value removes them.")
def update(slug: str, models: str | None, file_attachments: bool | None, web_search: bool | None,
           budget_usd: float | None, budget_period: str | None, no_budget: bool, guardrails: str | None) -> None:
    """Change an organisation's settings; running servers obey them from the next request."""
    if budget_usd is not None and no_budget:
        raise click.UsageError("give a new budget or remove it, not both")
    changes: dict[str, Any] = {}
    if budget_usd is not None or no_budget:
        changes["budget_usd"] = budget_usd
    if budget_period is not None:
        changes["budget_period"] = budget_period
    if models is not None:
        changes["models"] = _allow_list(models)
    if file_attachments is not None:
        changes["file_attachments"] = file_attachments
    if web_search is not None:
        changes["web_search"] = web_search
    if guardrails is not None:
        changes["guardrails"] = guardrail_names(settings_from_env(), guardrails)
    if not changes:
        raise click.UsageError("nothing to change: give --models, --[no-]file-attachments, --[no-]web-search, "
                               "--guardrails, --budget-usd, --budget-period or --no-budget")

    async def work(engine: AsyncEngine) -> Org | None:
        org = await OrgRepository(engine).get_by_slug(slug)
        if org is None:
            return None
        # Keys carry their org's allow-list and budget: propagate drops every server's key cache.
        return await KeyRepository(engine).propagate(lambda conn: update_settings(conn, org.id, changes, CLI_ACTOR),
                                                      slug)

    if run_with_db(settings_from_env(), work) is None:
        raise click.ClickException(f"no org {slug!r}")
    click.echo(f"updated org {slug}: " + ", ".join(f"{k}={v}" for k, v in changes.items()))

"""`inferd usage --key ACCESS_KEY_ID | --org SLUG [--group-by G] [--from T] [--to T]`: a summary table."""

from __future__ import annotations

import asyncio
from datetime import datetime

import click
from rich.console import Console
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.api.usage import DEFAULT_WINDOW, GROUPS, parse_moment, rfc3339
from inferd.cli.common import run_with_db, settings_from_env
from inferd.errors import InvalidRequest
from inferd.metering.journal_file import settle_path
from inferd.metering.journal_pg import settle_database
from inferd.store.db import utcnow
from inferd.store.usage import SummaryGroup, UsageQuery, UsageRepository, order_groups

CLI_GROUPS = (*GROUPS, "deployment")


def _moment(name: str, value: str | None, default: datetime) -> datetime:
    if value is None:
        return default
    try:
        return parse_moment(name, value)
    except InvalidRequest as exc:
        raise click.BadParameter(exc.message, param_hint=f"--{name}") from None


def _group_option(value: str) -> str:
    if value in CLI_GROUPS or (value.startswith("metadata.") and len(value) > len("metadata.")):
        return value
    raise click.BadParameter(f"expected one of {', '.join(CLI_GROUPS)} or metadata.<tag_key>",
                             param_hint="--group-by")


@click.command("usage")
@click.option("--key", "access_key_id", default=None, help="A long-lived key's access key id.")
@click.option("--org", "org_slug", default=None, help="An org slug: every key of the org.")
@click.option("--group-by", "group_by", default="model", show_default=True,
              help="model, workspace, deployment, key_id, user_id, team, day or metadata.<tag_key>.")
@click.option("--from", "start", default=None, help="Inclusive; RFC 3339 or YYYY-MM-DD (default: 30 days ago).")
@click.option("--to", "end", default=None, help="Exclusive; RFC 3339 or YYYY-MM-DD (default: now).")
def usage(access_key_id: str | None, org_slug: str | None, group_by: str, start: str | None,
          end: str | None) -> None:
    """Print a usage summary of one key or one org, read from the database."""
    if (access_key_id is None) == (org_slug is None):
        raise click.UsageError("give exactly one of --key and --org")
    group_by = _group_option(group_by)
    now = utcnow()
    until = _moment("to", end, now)
    since = _moment("from", start, now - DEFAULT_WINDOW)
    if until <= since:
        raise click.BadParameter("must be strictly after --from", param_hint="--to")

    settings = settings_from_env()

    async def work(engine: AsyncEngine) -> list[SummaryGroup]:
        # The servers' rows still in journals first.
        if engine.dialect.name == "sqlite" and engine.url.database:
            await asyncio.to_thread(settle_path, engine.url.database)
        elif engine.dialect.name == "postgresql":
            await settle_database(engine.url, settings.data_dir)
        repo = UsageRepository(engine)
        if org_slug is not None:
            key_ids = await repo.org_key_ids(org_slug)
            if key_ids is None:
                raise click.ClickException(f"no org {org_slug!r}")
        else:
            key_ids = (str(access_key_id),)
        query = UsageQuery(key_ids=key_ids, start=since, end=until)
        return order_groups(await repo.summary(query, group_by))

    groups = run_with_db(settings, work)
    who = f"key {access_key_id}" if org_slug is None else f"org {org_slug}"
    table = Table(title=f"usage of {who} by {group_by}, {rfc3339(since)} to {rfc3339(until)}")
    table.add_column(group_by)
    for name in ("requests", "prompt tokens", "cached prompt", "completion tokens", "total tokens", "cost USD"):
        table.add_column(name, justify="right")
    for group in groups:
        table.add_row(*_cells(group))
    total = SummaryGroup("total")
    for group in groups:
        total.requests += group.requests
        total.prompt_tokens += group.prompt_tokens
        total.cached_prompt_tokens += group.cached_prompt_tokens
        total.completion_tokens += group.completion_tokens
        total.cost_usd += group.cost_usd
    table.add_section()
    table.add_row(*_cells(total), style="bold")
    Console(width=160).print(table)


def _cells(group: SummaryGroup) -> list[str]:
    return [group.group_value if group.group_value is not None else "(none)", f"{group.requests:,}",
            f"{group.prompt_tokens:,}", f"{group.cached_prompt_tokens:,}", f"{group.completion_tokens:,}",
            f"{group.prompt_tokens + group.completion_tokens:,}", f"{group.cost_usd:,.6f}"]

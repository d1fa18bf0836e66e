"""`inferd orgs create SLUG [--models ID,ID|*] [--no-file-attachments] [--web-search]` and
`inferd orgs update SLUG …` (recorded in the org's audit log, `org.create` and `org.update`, with
the actor `cli`)."""

from __future__ import annotations

from typing import Any

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.cli.common import run_with_db, settings_from_env
from inferd.store.audit import CLI_ACTOR, AuditEntry, AuditLog
from inferd.store.keys import KeyRepository
from inferd.store.orgs import Org, OrgRepository, models_setting, update_settings


def _allow_list(models: str) -> tuple[str, ...] | None:
    return None if models.strip() == "*" else tuple(m.strip() for m in models.split(",") if m.strip())


async def record_creation(engine: AsyncEngine, org: Org, actor: str = CLI_ACTOR) -> None:
    """The org's first audit entry: `org.create` with the settings it was created with (written
    right after the org, whose store commits it on its own)."""
    await AuditLog(engine).record(org.id, AuditEntry(actor, "org.create", org.slug, {
        "models": models_setting(org.allowed_models), "file_attachments": org.file_attachments,
        "web_search": org.web_search}))


@click.group()
def orgs() -> None:
    """Manage organisations."""


@orgs.command("create")
@click.argument("slug")
@click.option("--models", default="*", show_default=True, help="Allowed model ids or aliases, comma-separated, or *.")
@click.option("--no-file-attachments", is_flag=True, help="Disable file attachments for the org.")
@click.option("--web-search", is_flag=True, help="Enable web search for the org.")
def create(slug: str, models: str, no_file_attachments: bool, web_search: bool) -> None:
    """Create an organisation."""
    allowed = _allow_list(models)

    async def work(engine: AsyncEngine) -> Org:
        repo = OrgRepository(engine)
        if await repo.get_by_slug(slug) is not None:
            raise click.ClickException(f"org {slug!r} already exists")
        org = await repo.create(slug, allowed, file_attachments=not no_file_attachments, web_search=web_search)
        await record_creation(engine, org)
        return org

    org = run_with_db(settings_from_env(), work)
    click.echo(f"created org {org.slug} (id {org.id}), models: {models}")


@orgs.command("update")
@click.argument("slug")
@click.option("--models", default=None, help="Allowed model ids or aliases, comma-separated, or *.")
@click.option("--file-attachments/--no-file-attachments", default=None, help="Enable or disable file attachments.")
@click.option("--web-search/--no-web-search", default=None, help="Enable or disable web search.")
def update(slug: str, models: str | None, file_attachments: bool | None, web_search: bool | None) -> None:
    """Change an organisation's settings; running servers obey them from the next request."""
    changes: dict[str, Any] = {}
    if models is not None:
        changes["models"] = _allow_list(models)
    if file_attachments is not None:
        changes["file_attachments"] = file_attachments
    if web_search is not None:
        changes["web_search"] = web_search
    if not changes:
        raise click.UsageError("nothing to change: give --models, --[no-]file-attachments or --[no-]web-search")

    async def work(engine: AsyncEngine) -> Org | None:
        org = await OrgRepository(engine).get_by_slug(slug)
        if org is None:
            return None
        # Keys carry their org's allow-list: propagate drops every server's key cache.
        return await KeyRepository(engine).propagate(lambda conn: update_settings(conn, org.id, changes, CLI_ACTOR),
                                                      slug)

    if run_with_db(settings_from_env(), work) is None:
        raise click.ClickException(f"no org {slug!r}")
    click.echo(f"updated org {slug}: " + ", ".join(f"{k}={v}" for k, v in changes.items()))

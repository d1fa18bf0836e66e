"""`inferd orgs create SLUG [--models ID,ID|*] [--no-file-attachments] [--web-search]`."""

from __future__ import annotations

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.cli.common import run_with_db, settings_from_env
from inferd.store.orgs import Org, OrgRepository


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
    allowed = None if models.strip() == "*" else tuple(m.strip() for m in models.split(",") if m.strip())

    async def work(engine: AsyncEngine) -> Org:
        repo = OrgRepository(engine)
        if await repo.get_by_slug(slug) is not None:
            raise click.ClickException(f"org {slug!r} already exists")
        return await repo.create(slug, allowed, file_attachments=not no_file_attachments, web_search=web_search)

    org = run_with_db(settings_from_env(), work)
    click.echo(f"created org {org.slug} (id {org.id}), models: {models}")

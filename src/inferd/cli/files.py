"""`inferd files migrate`: move the files kept in this machine's data directory into the configured
file backend (the database on PostgreSQL, or `[storage]`'s bucket)."""

from __future__ import annotations

from pathlib import Path

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.cli.common import run_with_db, settings_from_env
from inferd.errors import ConfigError
from inferd.store.files import build_file_store
from inferd.store.files_migrate import MigrationReport, migrate_files
from inferd.wiring import load_config


@click.group("files")
def files() -> None:
    """Stored files (batch inputs, outputs and error files)."""


@files.command("migrate")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="TOML configuration file (default: $INFERD_CONFIG, else the built-in catalogue).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data directory whose files/ folder is moved (default: $INFERD_DATA_DIR, else ./data).")
@click.option("--keep-local", is_flag=True, default=False,
              help="Leave the local copies in place (by default each is deleted once its row names the store).")
def migrate(config_path: Path | None, data_dir: Path | None, keep_local: bool) -> None:
    """Move <data dir>/files into the file store. Resumable and idempotent: run it again after an
    interruption, on every machine whose data directory holds files; servers may keep running."""
    settings = settings_from_env(config_path=config_path, data_dir=data_dir)
    try:
        config, _ = load_config(settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None

    async def work(engine: AsyncEngine) -> MigrationReport:
        try:
            store = build_file_store(engine, settings.data_dir, config.storage)
            return await migrate_files(engine, store, keep_local)
        except (ConfigError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None

    report = run_with_db(settings, work)
    click.echo(f"moved {report.moved} files ({report.moved_bytes} bytes); "
               f"removed {report.removed} local copies; {len(report.missing)} missing here")
    for file_id in report.missing:
        click.echo(f"missing: {file_id} (its row names a local file this data directory lacks)", err=True)

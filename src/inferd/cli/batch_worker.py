"""`inferd batch-worker`: only the batch worker, for deployments that scale it apart from the API."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import click

from inferd.wiring import build_services
from inferd.cli.common import settings_from_env
from inferd.config import Settings
from inferd.errors import ConfigError
from inferd.worker.runner import worker_for


async def run_worker(settings: Settings) -> None:
    """Run the worker until SIGTERM or SIGINT, then hand its leases back."""
    services = await build_services(settings)
    worker = worker_for(services)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    worker.start()
    click.echo(f"inferd batch worker {worker.owner} running", err=True)
    try:
        await stop.wait()
    finally:
        await worker.stop()
        await services.close()


@click.command("batch-worker")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="TOML configuration file (default: $INFERD_CONFIG, else the built-in catalogue).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data directory (default: $INFERD_DATA_DIR, else ./data).")
def batch_worker(config_path: Path | None, data_dir: Path | None) -> None:
    """Run only the batch worker."""
    settings = settings_from_env(config_path=config_path, data_dir=data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        import uvloop
        uvloop.run(run_worker(settings))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None

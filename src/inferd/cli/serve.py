"""`inferd serve`: the HTTP server and, unless `--no-batch-worker`, the batch worker."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import click
import uvicorn
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.app import InferdApp
from inferd.cli.common import run_with_db, settings_from_env
from inferd.cli.keys import create_key
from inferd.config import LOG_FORMATS, Settings
from inferd.config_storage import storage_backend
from inferd.errors import ConfigError
from inferd.limits.worker_window import FILE_ENV as WORKER_RATE_FILE_ENV
from inferd.observe.logs import startup_line
from inferd.store.orgs import OrgRepository
from inferd.wiring import load_config

DEFAULT_ORG = "default"


async def bootstrap(engine: AsyncEngine) -> str | None:
    """On a database without orgs, create the `default` org and one application key."""
    if await OrgRepository(engine).count():
        return None
    access_key_id, secret = await create_key(engine, DEFAULT_ORG, "application", name="first key")
    return f"{access_key_id}:{secret}"


LIMITS_HELP = """\b
Limits on one request (see docs/api.md and docs/configuration.md):
  request bodies are capped while they arrive (413 request_too_large, the
  connection closed): 32 MiB on chat, count_tokens, embeddings, rerank and
  messages; 64 KiB on /v1/auth/exchange; 1 MiB on other JSON routes; uploads
  64 MiB (files), 50 MB (vectorize, multipart generate), 75 MiB (transcriptions).
  Embeddings take at most 2048 inputs, rerank 1000 documents; speech 4096
  characters at speed 0.25-4; images n 1-10, at most 2048x2048, 150 steps on
  an in-process model (400 beyond).
\b
Set in the configuration file:
  [limits] body_timeout_s = 30   grace for a body to arrive, then it must keep
                                 up 64 KiB/s on average (408 otherwise)
  [audio] max_duration_s = 3600  longest audio a transcription takes (400)
  [conversations] extract_timeout_s = 60
                                 time to extract one PDF or office document
                                 (400 extraction_timeout)
  [[models]] timeout_s, [batches] window_seconds / max_concurrency
Keys carry their own limits: inferd keys create --budget-usd X --rpm N.
"""


@click.command(epilog=LIMITS_HELP)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="TOML configuration file (default: $INFERD_CONFIG, else the built-in catalogue).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data directory (default: $INFERD_DATA_DIR, else ./data).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--no-batch-worker", is_flag=True, help="Do not run the batch worker in this process.")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default=None,
              help="text (default; warnings with request ids) or json (one object per request on stderr). "
                   "Default: [logging] format of the configuration file.")
def serve(host: str, port: int, config_path: Path | None, data_dir: Path | None, workers: int,
          no_batch_worker: bool, log_format: str | None) -> None:
    """Run the HTTP server."""
    settings = settings_from_env(config_path=config_path, data_dir=data_dir,
                                 batch_worker=False if no_batch_worker else None, log_format=log_format)
    try:
        catalogue, _ = load_config(settings)
        storage_backend(catalogue.storage, not settings.database_url.startswith("sqlite"))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    first_key = run_with_db(settings, bootstrap)
    if first_key:
        click.echo(f"Created org '{DEFAULT_ORG}' and its first application key (shown only once):")
        click.echo(first_key)
    banner = (f"inferd serving on http://{host}:{port}/v1 ({settings.config_path or 'built-in catalogue'}, "
              f"{_database_label(settings)})")
    click.echo(startup_line(banner, settings.log_format or catalogue.observe.log_format), err=True)
    options = dict(host=host, port=port, loop="uvloop", http="httptools", access_log=False, log_level="warning",
                   lifespan="on", timeout_graceful_shutdown=10, proxy_headers=False)
    if workers == 1:
        uvicorn.run(InferdApp(settings), **options)  # type: ignore[arg-type]
    else:
        os.environ.update(settings.environ())  # each worker process rebuilds the same settings
        # The workers share their metrics through files in a fresh folder (GET /metrics sums them)
        # and, without Redis, their rate windows through a file there (limits/worker_window.py);
        # spend is shared through the database either way.
        shared = Path(tempfile.mkdtemp(prefix="inferd-workers-"))
        (shared / "metrics").mkdir()
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(shared / "metrics")
        if not settings.redis_url:
            os.environ[WORKER_RATE_FILE_ENV] = str(shared / "rate-windows.db")
        try:
            uvicorn.run("inferd.app:create_app", factory=True, workers=workers, **options)  # type: ignore[arg-type]
        finally:
            shutil.rmtree(shared, ignore_errors=True)


def _database_label(settings: Settings) -> str:
    url = settings.database_url
    return "SQLite " + url.split(":///", 1)[1] if url.startswith("sqlite") else "PostgreSQL"

"""`inferd batch submit|list|get|cancel`: the batch API from a terminal, through inferd_client.

Client-side commands: they talk to a running server over HTTP (`--base-url`, `--api-key` or
`INFERD_API_KEY`), never to the database.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from inferd_client import Batch, Client, InferdClientError

DEFAULT_BASE_URL = "http://127.0.0.1:8080"


def _connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--api-key", envvar="INFERD_API_KEY", required=True,
                           help="ACCESS_KEY_ID:SECRET (default: $INFERD_API_KEY).")(command)
    return click.option("--base-url", envvar="INFERD_BASE_URL", default=DEFAULT_BASE_URL, show_default=True,
                        help="The server (default: $INFERD_BASE_URL).")(command)


def _client(base_url: str, api_key: str) -> Client:
    return Client(base_url, api_key, timeout=120)


def _fail(exc: InferdClientError) -> click.ClickException:
    return click.ClickException(str(exc))


def _show(batch: Batch) -> None:
    click.echo(json.dumps(batch.to_dict(), indent=2))


def _show_after(base_url: str, api_key: str, call: Callable[[Client, str], Batch], batch_id: str) -> None:
    """Print the batch a call about one batch (get, cancel) answers with."""
    try:
        with _client(base_url, api_key) as client:
            _show(call(client, batch_id))
    except InferdClientError as exc:
        raise _fail(exc) from None


@click.group()
def batch() -> None:
    """Submit and follow batches of chat completions (50% price, 24 h window)."""


@batch.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--wait", is_flag=True, help="Follow the batch with a progress bar, then download its files.")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Where --wait writes BATCH_ID_output.jsonl and BATCH_ID_errors.jsonl.")
@click.option("--metadata", "-m", multiple=True, metavar="KEY=VALUE", help="Batch metadata (repeatable).")
@click.option("--poll-interval", type=click.FloatRange(min=0.01), default=5.0, show_default=True,
              help="First wait between polls; doubles up to --max-interval.")
@click.option("--max-interval", type=click.FloatRange(min=0.01), default=30.0, show_default=True)
@_connection_options
def submit(file: Path, wait: bool, output_dir: Path, metadata: tuple[str, ...], poll_interval: float,
           max_interval: float, base_url: str, api_key: str) -> None:
    """Upload FILE (JSONL, one request per line) and start a batch over it."""
    pairs = dict(item.split("=", 1) for item in metadata if "=" in item)
    if len(pairs) != len(metadata):
        raise click.BadParameter("use KEY=VALUE", param_hint="--metadata")
    try:
        with _client(base_url, api_key) as client:
            uploaded = client.create_file(file)
            created = client.create_batch(uploaded.id, metadata=pairs or None)
            click.echo(f"batch {created.id} {created.status} (input file {uploaded.id}, {uploaded.bytes} bytes)")
            if not wait:
                return
            try:
                finished = _follow(client, created.id, poll_interval, max(poll_interval, max_interval))
            except KeyboardInterrupt:
                # Leaving the terminal does not stop the batch: say how to pick it up again.
                raise click.ClickException(f"stopped following; batch {created.id} keeps running "
                                           f"(inferd batch get {created.id})") from None
            _download(client, finished, output_dir)
    except InferdClientError as exc:
        raise _fail(exc) from None
    if finished.status != "completed":
        raise click.ClickException(f"batch {finished.id} ended {finished.status}"
                                   + (f": {json.dumps(finished.errors)}" if finished.errors else ""))


def _follow(client: Client, batch_id: str, poll_interval: float, max_interval: float) -> Batch:
    """Poll with a live bar of request_counts (completed and failed over total) until terminal."""
    console = Console(stderr=True)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(batch_id, total=None, failed=0)

        def show(state: Batch) -> None:
            counts = state.request_counts
            progress.update(task, total=counts.total or None, completed=counts.completed + counts.failed,
                            failed=counts.failed, description=f"{batch_id} {state.status}")

        return client.wait_batch(batch_id, poll_interval=poll_interval, max_interval=max_interval,
                                 on_progress=show)


def _download(client: Client, finished: Batch, output_dir: Path) -> None:
    """Write the output and error files (whichever exist) into `output_dir`."""
    output_dir.mkdir(parents=True, exist_ok=True)
    counts = finished.request_counts
    click.echo(f"batch {finished.id} {finished.status}: {counts.completed} completed, {counts.failed} failed, "
               f"{counts.total} total")
    for label, file_id in (("output", finished.output_file_id), ("errors", finished.error_file_id)):
        if file_id:
            path = output_dir / f"{finished.id}_{label}.jsonl"
            path.write_bytes(client.get_file_content(file_id))
            click.echo(f"{label}: {path}")


@batch.command(name="list")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True, help="Page size.")
@click.option("--max", "most", type=click.IntRange(min=1), default=None, help="Stop after this many batches.")
@_connection_options
def list_command(limit: int, most: int | None, base_url: str, api_key: str) -> None:
    """The org's batches, newest first."""
    table = Table("id", "status", "completed", "failed", "total", "created_at", "output_file_id", "error_file_id")
    try:
        with _client(base_url, api_key) as client:
            for item in _take(client.list_batches(limit=limit), most):
                counts = item.request_counts
                table.add_row(item.id, item.status, str(counts.completed), str(counts.failed), str(counts.total),
                              str(item.created_at), item.output_file_id or "", item.error_file_id or "")
    except InferdClientError as exc:
        raise _fail(exc) from None
    Console(width=200).print(table)


def _take(batches: Iterator[Batch], most: int | None) -> Iterator[Batch]:
    for count, item in enumerate(batches, start=1):
        yield item
        if most is not None and count >= most:
            return


@batch.command()
@click.argument("batch_id")
@_connection_options
def get(batch_id: str, base_url: str, api_key: str) -> None:
    """One batch, as JSON."""
    _show_after(base_url, api_key, Client.get_batch, batch_id)


@batch.command()
@click.argument("batch_id")
@_connection_options
def cancel(batch_id: str, base_url: str, api_key: str) -> None:
    """Cancel a batch (`cancelling` while its lines in flight drain, else `cancelled`)."""
    _show_after(base_url, api_key, Client.cancel_batch, batch_id)

"""The `inferd` command line: serve, orgs, teams, keys, usage, batch-worker, batch."""

from __future__ import annotations

import click

from inferd.cli.batch import batch
from inferd.cli.batch_worker import batch_worker
from inferd.cli.keys import keys
from inferd.cli.orgs import orgs
from inferd.cli.serve import serve
from inferd.cli.teams import teams
from inferd.cli.usage import usage


@click.group()
def main() -> None:
    """inferd: a self-hosted, OpenAI-compatible inference API."""


main.add_command(serve)
main.add_command(orgs)
main.add_command(keys)
main.add_command(teams)
main.add_command(batch_worker)
main.add_command(batch)
main.add_command(usage)

"""The `inferd` command line: serve, orgs, teams, keys, usage, batch-worker, batch, files."""

from __future__ import annotations

import importlib
from typing import Any

import click

# Each command's module, imported only when that command runs (or `--help` lists them all): `serve`
# and `batch-worker` import the whole server, about 1.5 s of a core, which `keys create` or `orgs
# update` have no use for.
COMMANDS = {
    "serve": "inferd.cli.serve:serve",
    "orgs": "inferd.cli.orgs:orgs",
    "keys": "inferd.cli.keys:keys",
    "teams": "inferd.cli.teams:teams",
    "batch-worker": "inferd.cli.batch_worker:batch_worker",
    "batch": "inferd.cli.batch:batch",
    "usage": "inferd.cli.usage:usage",
    "files": "inferd.cli.files:files",
}


class LazyGroup(click.Group):
    """A group whose subcommands are named by `module:attribute` and imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, lazy=COMMANDS)
def main() -> None:
    """inferd: a self-hosted, OpenAI-compatible inference API."""

"""What every command shares: settings from the environment, a migrated database."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.config import Settings
from inferd.errors import ConfigError
from inferd.store.db import create_engine, migrate

T = TypeVar("T")


def run_with_db(settings: Settings, work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """Open and migrate the database, run `work` on it, close it."""

    async def go() -> T:
        engine = create_engine(settings.database_url)
        try:
            await migrate(engine)
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def settings_from_env(**overrides: Any) -> Settings:
    """Settings, with command-line values winning over the environment."""
    try:
        return Settings.from_env(**{k: v for k, v in overrides.items() if v is not None})
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None

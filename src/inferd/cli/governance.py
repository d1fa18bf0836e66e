"""What the governance commands share: `ORG/TEAM`, model lists, the
catalogue's names, and the service's refusals as command-line errors.

The checks are the admin routes' own (services/key_settings.py, services/admin_teams.py), so the
operator and an org's admin are refused the same things, and a refused command writes nothing.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator, Mapping

import click

from inferd.config import Settings
from inferd.errors import ConfigError, InferdError
from inferd.protocol.admin_fields import TEAM_NAME_PATTERN
from inferd.services.model_lists import NamesOf, model_limits, names_in, parse_model_limit
from inferd.store.key_limits import PERIODS

PERIOD = click.Choice(PERIODS)
PERIOD_HELP = "The budget's period: day, week (from Monday), month (the default) or total (never resets), UTC."


def org_team(value: str) -> tuple[str, str]:
    """`ORG/TEAM` as (org slug, team name); a usage error when malformed."""
    org, _, team = value.partition("/")
    if not org or not re.fullmatch(TEAM_NAME_PATTERN, team):
        raise click.BadParameter("expected ORG/TEAM, the team's name of letters, digits, '.', '_' or '-'",
                                 param_hint="ORG/TEAM")
    return org, team


def team_name(value: str) -> str:
    """A team's name (of the key's org); a usage error when malformed."""
    if not re.fullmatch(TEAM_NAME_PATTERN, value):
        raise click.BadParameter("a team's name is letters, digits, '.', '_' or '-'", param_hint="--team")
    return value


def model_list(value: str) -> list[str]:
    """`a,b` as a list of names."""
    return [name.strip() for name in value.split(",") if name.strip()]


def catalogue_names(settings: Settings) -> NamesOf:
    """The names of the configured catalogue's models (read only when a command names models: it
    loads the engines' option lists)."""
    from inferd.wiring import load_config  # every engine's options: only for the commands that need it

    try:
        return names_in(load_config(settings)[0].models)
    except ConfigError as exc:
        raise click.ClickException(f"the configuration, needed to check --models, is wrong: {exc}") from None


def guardrail_names(settings: Settings, value: str) -> tuple[str, ...]:
    """`a,b` as the names of configured `[[guardrails]]` (an empty value: none); a name the
    configuration file does not have is an error, not a guardrail silently never applied."""
    from inferd.wiring import load_config  # every engine's options: only for the commands that need it

    names = tuple(dict.fromkeys(model_list(value)))
    if not names:
        return ()
    try:
        configured = [g.name for g in load_config(settings)[0].guardrails]
    except ConfigError as exc:
        raise click.ClickException(f"the configuration, needed to check --guardrails, is wrong: {exc}") from None
    unknown = [name for name in names if name not in configured]
    if unknown:
        raise click.ClickException(f"no guardrail {', '.join(map(repr, unknown))} in the configuration file "
                                   f"(configured: {', '.join(configured) or 'none'})")
    return names


@contextmanager
def refusals() -> Iterator[None]:
    """The service's refusals (an unknown team, models wider than allowed, a team still in use) as
    command-line errors (exit 1) with their message."""
    try:
        yield
    except InferdError as exc:
        raise click.ClickException(exc.message) from None


ModelLimitChanges = tuple[dict[str, dict[str, int]], tuple[str, ...]]


def model_limit_changes(given: tuple[str, ...], removed: tuple[str, ...]) -> ModelLimitChanges | None:
    """`--model-limit MODEL:rpm=N,tpm=N` and `--no-model-limit MODEL` options as (windows to set,
    models to clear); None when neither was given. A usage error when one is malformed."""
    if not given and not removed:
        return None
    added: dict[str, dict[str, int]] = {}
    for text in given:
        try:
            model, limits = parse_model_limit(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--model-limit") from None
        added[model] = limits
    return added, removed


def merged_model_limits(current: Mapping[str, dict[str, int]] | None, change: ModelLimitChanges,
                        names_of: NamesOf) -> dict[str, dict[str, int]] | None:
    """A key's or team's per-model windows after `change` (keyed by canonical model id; an unknown
    model is refused by the service's check)."""
    added, removed = change
    merged = dict(current or {})
    for name in removed:
        names = names_of(name) or (name,)
        merged.pop(names[0], None)
    merged.update(model_limits(added, names_of) or {})
    return merged or None

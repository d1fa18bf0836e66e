"""`inferd keys create …`, `inferd keys update ACCESS_KEY_ID …`, `inferd keys revoke ACCESS_KEY_ID` and
`inferd keys rotate ACCESS_KEY_ID [--grace DURATION]`.

Each command records its change in the org's audit log with the actor `cli`.

`keys create --user EMAIL` refuses a user that an idp subject already owns, as the admin route does:
the key would mint that user's keys on the exchange and read
their conversations. The operator may still bind one deliberately with `--allow-linked-user`, and
the audit entry says so (`linked_user: true`).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.auth.keys import hash_secret, mint
from inferd.cli.common import run_with_db, settings_from_env
from inferd.cli.governance import (PERIOD, PERIOD_HELP, catalogue_names, merged_model_limits, model_limit_changes,
                                   model_list, refusals, team_name)
from inferd.cli.orgs import record_creation
from inferd.errors import UserAlreadyLinked
from inferd.limits.periods import parse_duration, since
from inferd.store.audit import CLI_ACTOR, AuditEntry
from inferd.store.keys import MAX_ROTATION_GRACE_S, KeyRepository
from inferd.services.key_settings import key_changes, shown_settings
from inferd.services.model_lists import NamesOf
from inferd.store.orgs import Org, OrgRepository
from inferd.store.teams import TeamRepository
from inferd.store.users import UserRepository


async def create_key(engine: AsyncEngine, org_slug: str, key_type: str, name: str | None = None,
                     user_email: str | None = None, budget_usd: float | None = None,
                     rpm: int | None = None, actor: str | None = None,
                     allow_linked_user: bool = False, governance: Mapping[str, Any] | None = None,
                     names_of: NamesOf = lambda name: None) -> tuple[str, str]:
    """Mint a long-lived key (creating the org when missing); returns (access key id, secret).
    With `actor` the creation (and the org's, when new) is recorded in the audit log (the commands
    do; the test harness and the first start's bootstrap key do not). A `user_email` whose user an
    idp subject owns raises UserAlreadyLinked unless `allow_linked_user`. `governance`: decision
    23's team, tpm, budget_period, models (checked with `names_of`) and expires_in, checked before
    anything, the org included, is written (InferdError otherwise)."""
    repo = OrgRepository(engine)
    org = await repo.get_by_slug(org_slug)
    keys_repo = KeyRepository(engine)
    # A new org is checked as the one it would be (no teams, every model), then created.
    settings = await key_changes(TeamRepository(engine, keys_repo), org or Org(0, org_slug, None, True, False),
                                 governance or {}, names_of)
    if org is None:
        org = await repo.create(org_slug)
        if actor is not None:
            await record_creation(engine, org, actor)
    user_id, linked = None, False
    if user_email:
        user_id, linked = await UserRepository(engine).email_user(org.id, user_email)
        if linked and not allow_linked_user:
            raise UserAlreadyLinked(user_email)
    access_key_id, secret = mint()
    details = {"type": key_type, "name": name, "user_email": user_email, "budget_usd": budget_usd, "rpm": rpm,
               **shown_settings(governance or {}, settings)}
    if linked:
        details["linked_user"] = True
    audit = None if actor is None else AuditEntry(actor, "key.create", access_key_id, details)
    await keys_repo.create(access_key_id=access_key_id, secret_hash=hash_secret(secret), key_type=key_type,
                           org_id=org.id, name=name, user_id=user_id, budget_usd=budget_usd, rpm=rpm, audit=audit,
                           **settings)
    return access_key_id, secret


def model_limit_options(whose: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--model-limit` and `--no-model-limit` of `keys update` and `teams update` (`whose`: key or team),
    read by governance.model_limit_changes."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option("--no-model-limit", "no_model_limit", multiple=True, metavar="MODEL",
                               help=f"Remove the {whose}'s windows on one model (repeat for several).")(command)
        return click.option("--model-limit", "model_limit", multiple=True, metavar="MODEL:rpm=N,tpm=N",
                            help=f"The {whose}'s own windows on one model (id or alias; repeat for several).")(command)

    return add


@click.group()
def keys() -> None:
    """Manage long-lived keys."""


@keys.command("create")
@click.option("--org", "org_slug", required=True, help="Org slug (created with defaults when missing).")
@click.option("--type", "key_type", type=click.Choice(["application", "admin"]), required=True)
@click.option("--name", default=None)
@click.option("--user", "user_email", default=None, help="Email of the user who owns the key.")
@click.option("--allow-linked-user", is_flag=True,
              help="Bind the key even to a user who already signs in through the identity provider (the key "
                   "can then act as that user).")
@click.option("--budget-usd", type=click.FloatRange(min=0), default=None,
              help="Budget in USD per --budget-period (monthly by default).")
@click.option("--rpm", type=click.IntRange(min=1, max=2**31 - 1), default=None, help="Requests per minute.")
@click.option("--team", default=None, help="The team of the org the key belongs to.")
@click.option("--tpm", type=click.IntRange(min=1, max=2**31 - 1), default=None, help="Tokens per minute.")
@click.option("--budget-period", type=PERIOD, default=None, help=PERIOD_HELP)
@click.option("--models", default=None,
              help="Model ids or aliases, comma-separated, within its team's and org's (default: theirs).")
@click.option("--expires-in", default=None, help="Expire the key after this long: 30d, 12h, 15m.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def create(org_slug: str, key_type: str, name: str | None, user_email: str | None, allow_linked_user: bool,
           budget_usd: float | None, rpm: int | None, team: str | None, tpm: int | None, budget_period: str | None,
           models: str | None, expires_in: str | None, as_json: bool) -> None:
    """Mint a key; the secret is shown once and stored only as a hash."""
    governance = {name: value for name, value in (("team", team and team_name(team)), ("tpm", tpm),
                                                  ("budget_period", budget_period), ("expires_in", expires_in),
                                                  ("models", models and model_list(models))) if value is not None}
    names_of = catalogue_names(settings_from_env()) if models is not None else (lambda name: None)

    async def work(engine: AsyncEngine) -> tuple[str, str]:
        return await create_key(engine, org_slug, key_type, name, user_email, budget_usd, rpm, actor=CLI_ACTOR,
                                allow_linked_user=allow_linked_user, governance=governance, names_of=names_of)

    with refusals():  # an unknown team, models wider than allowed, a malformed duration
        try:
            access_key_id, secret = run_with_db(settings_from_env(), work)
        except UserAlreadyLinked as exc:
            raise click.ClickException(f"{exc.message}; pass --allow-linked-user to bind the key anyway") from None
    full_key = f"{access_key_id}:{secret}"
    if as_json:
        click.echo(json.dumps({"access_key_id": access_key_id, "secret": secret, "full_key": full_key,
                               "org": org_slug, "type": key_type}))
    else:
        click.echo(f"created {key_type} key {access_key_id} in org {org_slug} (the secret is shown only once)")
        click.echo(full_key)


@keys.command("revoke")
@click.argument("access_key_id")
def revoke(access_key_id: str) -> None:
    """Revoke a key: it answers 401 from then on."""

    async def work(engine: AsyncEngine) -> bool:
        return await KeyRepository(engine).revoke(access_key_id, actor=CLI_ACTOR)

    if not run_with_db(settings_from_env(), work):
        raise click.ClickException(f"no live key {access_key_id}")
    click.echo(f"revoked {access_key_id}")


@keys.command("rotate")
@click.argument("access_key_id")
@click.option("--grace", default="0s", show_default=True,
              help="How long the old secret stays valid (30d, 12h, 15m, 45s; 0s: not at all).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def rotate(access_key_id: str, grace: str, as_json: bool) -> None:
    """Give a key a new secret, keeping its id, usage and limits; the new secret is shown once."""
    try:
        grace_s = 0.0 if grace.strip() == "0" else parse_duration(grace)  # a bare 0 needs no unit
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--grace") from None
    if grace_s > MAX_ROTATION_GRACE_S:
        raise click.BadParameter(f"at most {MAX_ROTATION_GRACE_S // 86400}d", param_hint="--grace")
    secret = mint()[1]  # only the secret: the access key id stays

    async def work(engine: AsyncEngine) -> bool:
        return await KeyRepository(engine).rotate(access_key_id, None, hash_secret(secret), grace_s, CLI_ACTOR)

    if not run_with_db(settings_from_env(), work):
        raise click.ClickException(f"no live application or admin key {access_key_id}")
    full_key = f"{access_key_id}:{secret}"
    if as_json:
        click.echo(json.dumps({"access_key_id": access_key_id, "secret": secret, "full_key": full_key,
                               "grace_s": grace_s}))
    else:
        click.echo(f"rotated key {access_key_id} (the old secret is valid for {grace_s:g} s more; "
                   "the new one is shown only once)")
        click.echo(full_key)


@keys.command("update")
@click.argument("access_key_id")
@click.option("--name", default=None, help="A new name.")
@click.option("--budget-usd", type=click.FloatRange(min=0), default=None, help="A new budget in USD.")
@click.option("--no-budget", is_flag=True, help="Remove the budget.")
@click.option("--budget-period", type=PERIOD, default=None, help=PERIOD_HELP)
@click.option("--rpm", type=click.IntRange(min=1, max=2**31 - 1), default=None, help="A new requests-per-minute limit.")
@click.option("--no-rpm", is_flag=True, help="Remove the requests-per-minute limit.")
@click.option("--tpm", type=click.IntRange(min=1, max=2**31 - 1), default=None, help="A new tokens-per-minute limit.")
@click.option("--no-tpm", is_flag=True, help="Remove the tokens-per-minute limit.")
@click.option("--team", default=None, help="Move the key to this team of its org.")
@click.option("--no-team", is_flag=True, help="Take the key out of its team.")
@click.option("--models", default=None, help="Model ids or aliases, comma-separated, within its team's and org's.")
@click.option("--no-models", is_flag=True, help="Allow every model its team and org allow.")
@click.option("--expires-in", default=None, help="Expire the key this long from now: 30d, 12h, 15m.")
@click.option("--no-expiry", is_flag=True, help="The key never expires.")
@model_limit_options("key")
def update(access_key_id: str, name: str | None, budget_usd: float | None, no_budget: bool,
           budget_period: str | None, rpm: int | None, no_rpm: bool, tpm: int | None, no_tpm: bool,
           team: str | None, no_team: bool, models: str | None, no_models: bool, expires_in: str | None,
           no_expiry: bool, model_limit: tuple[str, ...], no_model_limit: tuple[str, ...]) -> None:
    """Change a key's name, budget, rate limits, team, models or expiry; running servers obey it from
    the next request."""
    changes: dict[str, Any] = {}
    for key, value, remove in (("budget_usd", budget_usd, no_budget), ("rpm", rpm, no_rpm), ("tpm", tpm, no_tpm),
                               ("team", team and team_name(team), no_team),
                               ("models", models and model_list(models), no_models),
                               ("expires_in", expires_in, no_expiry)):
        if value is not None and remove:
            raise click.UsageError("give a new limit or remove it, not both")
        if value is not None or remove:
            changes[key] = value
    if no_expiry:  # never expires
        changes["expires_at"] = changes.pop("expires_in")
    for key, value in (("name", name), ("budget_period", budget_period)):
        if value is not None:
            changes[key] = value
    limits_given = model_limit_changes(model_limit, no_model_limit)
    if not changes and limits_given is None:
        raise click.UsageError("nothing to change: give --name, --budget-usd, --budget-period, --rpm, --tpm, "
                               "--team, --models, --model-limit, --expires-in or one of their --no- options")
    names_of = (catalogue_names(settings_from_env()) if models is not None or limits_given is not None
                else (lambda name: None))

    async def work(engine: AsyncEngine) -> bool:
        keys_repo = KeyRepository(engine)
        org_id = await keys_repo.org_of(access_key_id)
        org = await OrgRepository(engine).get(org_id) if org_id is not None else None
        if org is None:
            return False
        view = (await keys_repo.administered(org.id, since, access_key_id))[0]  # its team and models now
        if limits_given is not None:
            changes["model_limits"] = merged_model_limits(view.model_limits, limits_given, names_of)
        settings = await key_changes(TeamRepository(engine, keys_repo), org, changes, names_of, view.team,
                                     view.models)
        return await keys_repo.update(access_key_id, None, settings, CLI_ACTOR)

    with refusals():  # an unknown team, models wider than allowed, a malformed duration
        if not run_with_db(settings_from_env(), work):
            raise click.ClickException(f"no application or admin key {access_key_id}")

    click.echo(f"updated {access_key_id}: " + ", ".join(f"{k}={v}" for k, v in changes.items()))

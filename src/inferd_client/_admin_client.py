"""The /v1/admin methods of `Client` and `AsyncClient` (an admin key).

Administration is a concept of its own, so its methods live here as one base class per client,
written side by side like the clients themselves; each client supplies `_call`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence, TypeVar, Union

from inferd_client import _admin_routes as admin_routes
from inferd_client._admin_types import (AdminKey, AdminKeyList, AuditPage, CreatedKey, DeploymentList, OrgSettings,
                                        Team, TeamDeleted, TeamList)
from inferd_client._calls import NOT_GIVEN, Call, NotGiven

R = TypeVar("R")
S = TypeVar("S")
ModelLimits = Mapping[str, Mapping[str, int]]  # {model id or alias: {"rpm": N, "tpm": N}}
# A setting an update may change: a value, None to remove it, or NOT_GIVEN (the default) to leave it as it is.
Change = Union[S, None, NotGiven]


class AdminMethods:
    """Keys, teams, org settings, deployments and the audit log of the admin key's org."""

    def _call(self, call: Call[R]) -> R:
        raise NotImplementedError  # `Client` sends the call

    # --- keys -----------------------------------------------------------------------------------

    def list_keys(self) -> AdminKeyList:
        """The org's application and admin keys, revoked ones included."""
        return self._call(admin_routes.list_keys())

    def create_key(self, type: str = "application", *, name: str | None = None, user_email: str | None = None,
                   budget_usd: float | None = None, rpm: int | None = None, team: str | None = None,
                   tpm: int | None = None, budget_period: str | None = None, models: Sequence[str] | None = None,
                   model_limits: ModelLimits | None = None, expires_in: str | None = None,
                   expires_at: str | datetime | None = None) -> CreatedKey:
        """Mint a key in the admin's org; `secret` and `full_key` are returned this once. `budget_period`
        is day, week, month or total; `models` lies within the team's and org's; the expiry is
        `expires_in` ("30d", "12h") or `expires_at` (a naive datetime is UTC)."""
        return self._call(admin_routes.create_key(type, dict(
            name=name, user_email=user_email, budget_usd=budget_usd, rpm=rpm, team=team, tpm=tpm,
            budget_period=budget_period, models=models, model_limits=model_limits, expires_in=expires_in,
            expires_at=expires_at)))

    def get_key(self, access_key_id: str) -> AdminKey:
        """One key of the org."""
        return self._call(admin_routes.get_key(access_key_id))

    def update_key(self, access_key_id: str, *, name: Change[str] = NOT_GIVEN, budget_usd: Change[float] = NOT_GIVEN,
                   rpm: Change[int] = NOT_GIVEN, team: Change[str] = NOT_GIVEN, tpm: Change[int] = NOT_GIVEN,
                   budget_period: Change[str] = NOT_GIVEN, models: Change[Sequence[str]] = NOT_GIVEN,
                   model_limits: Change[ModelLimits] = NOT_GIVEN, expires_in: Change[str] = NOT_GIVEN,
                   expires_at: Change[str | datetime] = NOT_GIVEN) -> AdminKey:
        """Change a key's settings (None removes a limit, a team, an expiry); only the arguments given are sent."""
        return self._call(admin_routes.update_key(access_key_id, dict(
            name=name, budget_usd=budget_usd, rpm=rpm, team=team, tpm=tpm, budget_period=budget_period,
            models=models, model_limits=model_limits, expires_in=expires_in, expires_at=expires_at)))

    def revoke_key(self, access_key_id: str) -> AdminKey:
        """Revoke a key (401 from its next request on)."""
        return self._call(admin_routes.revoke_key(access_key_id))

    def rotate_key(self, access_key_id: str, *, grace_s: float = 0) -> CreatedKey:
        """A new secret for the same key id (its usage and limits stay), returned this once in
        `secret` and `full_key`; the old secret keeps working `grace_s` seconds."""
        return self._call(admin_routes.rotate_key(access_key_id, grace_s))

    # --- teams ----------------------------------------------------------------------------------

    def list_teams(self) -> TeamList:
        """The org's teams by name, each with its spend in its budget's period."""
        return self._call(admin_routes.list_teams())

    def create_team(self, name: str, *, budget_usd: float | None = None, budget_period: str | None = None,
                    rpm: int | None = None, tpm: int | None = None, models: Sequence[str] | None = None,
                    model_limits: ModelLimits | None = None) -> Team:
        """A new team of the org (409 `team_exists` when the name is taken)."""
        return self._call(admin_routes.create_team(name, dict(
            budget_usd=budget_usd, budget_period=budget_period, rpm=rpm, tpm=tpm, models=models,
            model_limits=model_limits)))

    def get_team(self, name: str) -> Team:
        """One team of the org."""
        return self._call(admin_routes.get_team(name))

    def update_team(self, name: str, *, budget_usd: Change[float] = NOT_GIVEN, budget_period: Change[str] = NOT_GIVEN,
                    rpm: Change[int] = NOT_GIVEN, tpm: Change[int] = NOT_GIVEN,
                    models: Change[Sequence[str]] = NOT_GIVEN, model_limits: Change[ModelLimits] = NOT_GIVEN) -> Team:
        """Change a team's settings (None removes a limit); only the arguments given are sent."""
        return self._call(admin_routes.update_team(name, dict(
            budget_usd=budget_usd, budget_period=budget_period, rpm=rpm, tpm=tpm, models=models,
            model_limits=model_limits)))

    def delete_team(self, name: str) -> TeamDeleted:
        """Delete a team (409 `team_in_use` while a live key belongs to it)."""
        return self._call(admin_routes.delete_team(name))

    # --- org, deployments, audit ----------------------------------------------------------------

    def get_org(self) -> OrgSettings:
        """The org's allow-list and feature flags."""
        return self._call(admin_routes.get_org())

    def update_org(self, *, models: Sequence[str] | str | NotGiven = NOT_GIVEN,
                   file_attachments: bool | NotGiven = NOT_GIVEN,
                   web_search: bool | NotGiven = NOT_GIVEN) -> OrgSettings:
        """Change the org's allow-list (a list, or "*") and feature flags; only the arguments given are sent."""
        return self._call(admin_routes.update_org(models, file_attachments, web_search))

    def deployments(self) -> DeploymentList:
        """Every deployment's health as the answering server sees it."""
        return self._call(admin_routes.deployments())

    def audit(self, *, limit: int = 20, after: int | None = None) -> AuditPage:
        """One page of the org's audit log, newest first; `after` an entry id to page on."""
        return self._call(admin_routes.audit(limit, after))


class AsyncAdminMethods:
    """`AdminMethods`, awaited."""

    async def _call(self, call: Call[R]) -> R:
        raise NotImplementedError  # `AsyncClient` sends the call

    # --- keys -----------------------------------------------------------------------------------

    async def list_keys(self) -> AdminKeyList:
        """The org's application and admin keys, revoked ones included."""
        return await self._call(admin_routes.list_keys())

    async def create_key(self, type: str = "application", *, name: str | None = None, user_email: str | None = None,
                         budget_usd: float | None = None, rpm: int | None = None, team: str | None = None,
                         tpm: int | None = None, budget_period: str | None = None,
                         models: Sequence[str] | None = None, model_limits: ModelLimits | None = None,
                         expires_in: str | None = None, expires_at: str | datetime | None = None) -> CreatedKey:
        """Mint a key in the admin's org; `secret` and `full_key` are returned this once. `budget_period`
        is day, week, month or total; `models` lies within the team's and org's; the expiry is
        `expires_in` ("30d", "12h") or `expires_at` (a naive datetime is UTC)."""
        return await self._call(admin_routes.create_key(type, dict(
            name=name, user_email=user_email, budget_usd=budget_usd, rpm=rpm, team=team, tpm=tpm,
            budget_period=budget_period, models=models, model_limits=model_limits, expires_in=expires_in,
            expires_at=expires_at)))

    async def get_key(self, access_key_id: str) -> AdminKey:
        """One key of the org."""
        return await self._call(admin_routes.get_key(access_key_id))

    async def update_key(self, access_key_id: str, *, name: Change[str] = NOT_GIVEN,
                         budget_usd: Change[float] = NOT_GIVEN, rpm: Change[int] = NOT_GIVEN,
                         team: Change[str] = NOT_GIVEN, tpm: Change[int] = NOT_GIVEN,
                         budget_period: Change[str] = NOT_GIVEN, models: Change[Sequence[str]] = NOT_GIVEN,
                         model_limits: Change[ModelLimits] = NOT_GIVEN, expires_in: Change[str] = NOT_GIVEN,
                         expires_at: Change[str | datetime] = NOT_GIVEN) -> AdminKey:
        """Change a key's settings (None removes a limit, a team, an expiry); only the arguments given are sent."""
        return await self._call(admin_routes.update_key(access_key_id, dict(
            name=name, budget_usd=budget_usd, rpm=rpm, team=team, tpm=tpm, budget_period=budget_period,
            models=models, model_limits=model_limits, expires_in=expires_in, expires_at=expires_at)))

    async def revoke_key(self, access_key_id: str) -> AdminKey:
        """Revoke a key (401 from its next request on)."""
        return await self._call(admin_routes.revoke_key(access_key_id))

    async def rotate_key(self, access_key_id: str, *, grace_s: float = 0) -> CreatedKey:
        """A new secret for the same key id (its usage and limits stay), returned this once in
        `secret` and `full_key`; the old secret keeps working `grace_s` seconds."""
        return await self._call(admin_routes.rotate_key(access_key_id, grace_s))

    # --- teams ----------------------------------------------------------------------------------

    async def list_teams(self) -> TeamList:
        """The org's teams by name, each with its spend in its budget's period."""
        return await self._call(admin_routes.list_teams())

    async def create_team(self, name: str, *, budget_usd: float | None = None, budget_period: str | None = None,
                          rpm: int | None = None, tpm: int | None = None, models: Sequence[str] | None = None,
                          model_limits: ModelLimits | None = None) -> Team:
        """A new team of the org (409 `team_exists` when the name is taken)."""
        return await self._call(admin_routes.create_team(name, dict(
            budget_usd=budget_usd, budget_period=budget_period, rpm=rpm, tpm=tpm, models=models,
            model_limits=model_limits)))

    async def get_team(self, name: str) -> Team:
        """One team of the org."""
        return await self._call(admin_routes.get_team(name))

    async def update_team(self, name: str, *, budget_usd: Change[float] = NOT_GIVEN,
                          budget_period: Change[str] = NOT_GIVEN, rpm: Change[int] = NOT_GIVEN,
                          tpm: Change[int] = NOT_GIVEN, models: Change[Sequence[str]] = NOT_GIVEN,
                          model_limits: Change[ModelLimits] = NOT_GIVEN) -> Team:
        """Change a team's settings (None removes a limit); only the arguments given are sent."""
        return await self._call(admin_routes.update_team(name, dict(
            budget_usd=budget_usd, budget_period=budget_period, rpm=rpm, tpm=tpm, models=models,
            model_limits=model_limits)))

    async def delete_team(self, name: str) -> TeamDeleted:
        """Delete a team (409 `team_in_use` while a live key belongs to it)."""
        return await self._call(admin_routes.delete_team(name))

    # --- org, deployments, audit ----------------------------------------------------------------

    async def get_org(self) -> OrgSettings:
        """The org's allow-list and feature flags."""
        return await self._call(admin_routes.get_org())

    async def update_org(self, *, models: Sequence[str] | str | NotGiven = NOT_GIVEN,
                         file_attachments: bool | NotGiven = NOT_GIVEN,
                         web_search: bool | NotGiven = NOT_GIVEN) -> OrgSettings:
        """Change the org's allow-list (a list, or "*") and feature flags; only the arguments given are sent."""
        return await self._call(admin_routes.update_org(models, file_attachments, web_search))

    async def deployments(self) -> DeploymentList:
        """Every deployment's health as the answering server sees it."""
        return await self._call(admin_routes.deployments())

    async def audit(self, *, limit: int = 20, after: int | None = None) -> AuditPage:
        """One page of the org's audit log, newest first; `after` an entry id to page on."""
        return await self._call(admin_routes.audit(limit, after))

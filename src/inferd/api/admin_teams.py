"""/v1/admin/teams: an admin key administers its own org's teams. Any
other key type is 403 `admin_key_required`; another org's teams are 404 like unknown ones."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from inferd.api.deps import admin_key, services
from inferd.auth.key_record import KeyRecord
from inferd.protocol.admin_teams import TeamCreateRequest, TeamDeleted, TeamList, TeamObject, TeamSettings
from inferd.services.admin_teams import TeamAdministration
from inferd.store.teams import TeamRepository

router = APIRouter(tags=["admin"])


async def team_administration(request: Request) -> TeamAdministration:
    """The team service over this app's stores (it holds nothing of its own; async: no thread hop)."""
    svc = services(request)
    return TeamAdministration(TeamRepository(svc.db, svc.keys), svc.orgs, svc.catalogue, svc.writer.settle)


@router.get("/v1/admin/teams", response_model=TeamList)
async def list_teams(admin: KeyRecord = Depends(admin_key),
                     service: TeamAdministration = Depends(team_administration)) -> dict[str, Any]:
    """The org's teams by name, each with its spend in its budget's period under way."""
    return {"object": "list", "data": await service.list(admin)}


@router.post("/v1/admin/teams", response_model=TeamObject, status_code=201)
async def create_team(body: TeamCreateRequest, admin: KeyRecord = Depends(admin_key),
                      service: TeamAdministration = Depends(team_administration)) -> dict[str, Any]:
    """A new team: 409 `team_exists` when the name is taken, 400 when its models reach past the org's."""
    return await service.create(admin, body.name, body.model_dump(include=body.model_fields_set - {"name"}))


@router.get("/v1/admin/teams/{name}", response_model=TeamObject)
async def get_team(name: str, admin: KeyRecord = Depends(admin_key),
                   service: TeamAdministration = Depends(team_administration)) -> dict[str, Any]:
    """One team of the org (404 `team_not_found` otherwise)."""
    return await service.get(admin, name)


@router.patch("/v1/admin/teams/{name}", response_model=TeamObject)
async def update_team(name: str, body: TeamSettings, admin: KeyRecord = Depends(admin_key),
                      service: TeamAdministration = Depends(team_administration)) -> dict[str, Any]:
    """Change `budget_usd`, `budget_period`, `rpm`, `tpm`, `models` (null removes a limit); obeyed
    from the next request on, on every replica."""
    return await service.update(admin, name, body.model_dump(include=body.model_fields_set))


@router.delete("/v1/admin/teams/{name}", response_model=TeamDeleted)
async def delete_team(name: str, admin: KeyRecord = Depends(admin_key),
                      service: TeamAdministration = Depends(team_administration)) -> dict[str, Any]:
    """Delete a team: 409 `team_in_use` while a live key belongs to it (move or revoke those first)."""
    return await service.delete(admin, name)

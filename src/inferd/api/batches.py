"""/v1/batches: create, retrieve, list (newest first, `after` cursor), cancel."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from inferd.api.deps import long_lived_key, services
from inferd.auth.key_record import KeyRecord
from inferd.protocol.batches import BatchCreateRequest, BatchList, BatchObject
from inferd.protocol.checks import check_metadata
from inferd.store.audit import AuditLog

router = APIRouter(tags=["batches"])


@router.post("/v1/batches", response_model=BatchObject)
async def create_batch(request: Request, body: BatchCreateRequest,
                       key: KeyRecord = Depends(long_lived_key)) -> dict[str, Any]:
    """A new batch, answered `in_progress`; the worker validates the input file."""
    metadata = check_metadata(body.metadata)
    return await services(request).batches.create(key, body.input_file_id, body.endpoint, body.completion_window,
                                                  metadata)


@router.get("/v1/batches/{batch_id}", response_model=BatchObject)
async def get_batch(request: Request, batch_id: str, key: KeyRecord = Depends(long_lived_key)) -> dict[str, Any]:
    """One batch of the caller's key (any of the org's for an admin key)."""
    return await services(request).batches.get(key, batch_id)


@router.get("/v1/batches", response_model=BatchList)
async def list_batches(request: Request, limit: int = Query(20, ge=1, le=100), after: str | None = Query(None),
                       key: KeyRecord = Depends(long_lived_key)) -> dict[str, Any]:
    """One page of the caller's batches (the org's for an admin key), newest first."""
    return await services(request).batches.list_page(key, limit, after)


@router.post("/v1/batches/{batch_id}/cancel", response_model=BatchObject)
async def cancel_batch(request: Request, batch_id: str, key: KeyRecord = Depends(long_lived_key)) -> dict[str, Any]:
    """Cancel: `cancelling` while lines are in flight, else `cancelled`. An admin key cancelling
    another key's batch is recorded in the org's audit log (`batch.cancel`)."""
    svc = services(request)
    return await svc.batches.cancel(key, batch_id, AuditLog(svc.db))

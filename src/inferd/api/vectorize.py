"""POST /v1/conversations/{id}/files/vectorize: a file's text, chunked and embedded into a conversation."""

from __future__ import annotations

import re

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response

from inferd.api.deps import services, user_key
from inferd.api.body_limits import VECTORIZE_UPLOAD_BYTES
from inferd.api.uploads import read_upload
from inferd.auth.key_record import KeyRecord
from inferd.errors import InvalidRequest, PermissionDenied
from inferd.services.ingest.extract import EXTENSIONS
from inferd.services.ingest.service import vectorize
from inferd.protocol.conversations import MAX_ID

router = APIRouter(tags=["sources"])

_PATH_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INTEGER = re.compile(r"^-?[0-9]{1,18}$")


def vectorize_target(raw: str) -> int:
    """The path id as an integer (0 or negative: make a new conversation); 400 otherwise."""
    if not _PATH_ID.match(raw) or not _INTEGER.match(raw):
        raise InvalidRequest("id: must be an integer conversation id (0 or negative creates a conversation)",
                             param="id")
    # An id no conversation can have is a non-existent one: the server creates a conversation.
    return int(raw) if int(raw) <= MAX_ID else 0


@router.post("/v1/conversations/{id}/files/vectorize", status_code=201, openapi_extra={"requestBody": {
    "content": {"multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary",
                 "description": f"one of: {', '.join(sorted(EXTENSIONS))}; at most 50 MiB"}}}}}}})
async def vectorize_file(request: Request, id: str, ephemeral: bool = Query(False),
                         key: KeyRecord = Depends(user_key)) -> Response:
    """Extract, chunk and embed the uploaded `file` into the conversation (201), or link the caller's
    existing source with the same content (200, `total.duplicate`)."""
    svc = services(request)
    org = await svc.orgs.get_by_slug(key.org_slug)
    if org is None or not org.file_attachments:
        raise PermissionDenied("File attachments are disabled for this organisation", code="FEATURE_DISABLED")
    requested = vectorize_target(id)
    upload = await read_upload(request, "file", VECTORIZE_UPLOAD_BYTES, "File upload")
    try:
        assert upload.path is not None
        result = await vectorize(svc.ingestion, key, requested, upload.path, upload.filename or "", upload.size,
                                 ephemeral)
    finally:
        upload.discard()
    return Response(orjson.dumps(result.body), status_code=result.status, media_type="application/json")

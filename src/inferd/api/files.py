"""/v1/files: upload (multipart, spooled to the data dir, 413 past 64 MiB, then handed to the file
store's backend), read, content (streamed from the backend), delete."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, Response, StreamingResponse

from inferd.api.deps import long_lived_key, services
from inferd.api.body_limits import FILE_UPLOAD_BYTES
from inferd.api.uploads import read_upload
from inferd.auth.key_record import KeyRecord
from inferd.errors import InvalidRequest, NotFound
from inferd.protocol.files import FileDeleted, FileObject
from inferd.services.batches import file_object, owner_filter
from inferd.store.audit import AuditEntry, AuditLog
from inferd.store.files import StoredFile, new_file_id

router = APIRouter(tags=["files"])

PURPOSES = ("batch",)


def attachment(filename: str) -> str:
    """The Content-Disposition of a download, as FileResponse writes it for a local file."""
    quoted = quote(filename)
    return f"attachment; filename*=utf-8''{quoted}" if quoted != filename else f'attachment; filename="{filename}"'


async def _own_file(request: Request, file_id: str, key: KeyRecord) -> StoredFile:
    """A file the caller may see: its key's own, or any of its org's for an admin key (404 otherwise)."""
    stored = await services(request).batches.files.get(file_id, key.org_id, owner_filter(key))
    if stored is None:
        raise NotFound(f"No file '{file_id}'", code="file_not_found")
    return stored


@router.post("/v1/files", response_model=FileObject, openapi_extra={"requestBody": {"content": {
    "multipart/form-data": {"schema": {"type": "object", "required": ["purpose", "file"], "properties": {
        "purpose": {"type": "string", "enum": list(PURPOSES)}, "file": {"type": "string", "format": "binary"}}}}}}})
async def upload_file(request: Request, key: KeyRecord = Depends(long_lived_key)) -> dict[str, object]:
    """Store a JSONL batch input file; refused with 413 at the byte that passes 64 MiB."""
    store = services(request).batches.files
    upload = await read_upload(request, "file", FILE_UPLOAD_BYTES, "Batch input file", directory=store.folder)
    try:
        purpose = upload.fields.get("purpose")
        if purpose is None:
            raise InvalidRequest("purpose: required", param="purpose")
        if purpose not in PURPOSES:
            raise InvalidRequest(f"purpose: must be one of {', '.join(PURPOSES)}", param="purpose")
        assert upload.path is not None
        file_id = new_file_id()
        spooled, upload.path = upload.path, None  # the store consumes the spool file
        path = await store.publish(spooled, file_id)
    finally:
        upload.discard()
    stored = await store.add(file_id, key.org_id, key.access_key_id, upload.filename or "upload.jsonl", upload.size,
                             purpose, path)
    return file_object(stored)


@router.get("/v1/files/{file_id}", response_model=FileObject)
async def get_file(request: Request, file_id: str, key: KeyRecord = Depends(long_lived_key)) -> dict[str, object]:
    """A file of the caller's key (any of the org's for an admin key)."""
    return file_object(await _own_file(request, file_id, key))


@router.get("/v1/files/{file_id}/content", response_class=FileResponse,
            responses={200: {"content": {"application/jsonl": {}}}})
async def file_content(request: Request, file_id: str, key: KeyRecord = Depends(long_lived_key)) -> Response:
    """The file's bytes (JSONL), streamed from wherever they are kept."""
    stored = await _own_file(request, file_id, key)
    store = services(request).batches.files
    path = store.local_path(stored)
    if path is not None:  # in this data directory: sent by the server's file sender
        if not path.is_file():
            raise NotFound(f"The content of file '{file_id}' is gone", code="file_not_found")
        return FileResponse(path, media_type="application/jsonl", filename=stored.filename)
    chunks = await store.open(stored)
    if chunks is None:
        raise NotFound(f"The content of file '{file_id}' is gone", code="file_not_found")
    return StreamingResponse(chunks, media_type="application/jsonl", headers={
        "content-length": str(stored.bytes), "content-disposition": attachment(stored.filename)})


@router.delete("/v1/files/{file_id}", response_model=FileDeleted)
async def delete_file(request: Request, file_id: str, key: KeyRecord = Depends(long_lived_key)) -> dict[str, object]:
    """Delete a file: its row, then its bytes. An admin key deleting another key's file is recorded
    in the org's audit log (`file.delete`)."""
    stored = await _own_file(request, file_id, key)
    svc = services(request)
    await svc.batches.files.delete(stored)
    if key.type == "admin" and stored.key_id != key.access_key_id:
        await AuditLog(svc.db).record(key.org_id, AuditEntry(key.access_key_id, "file.delete", stored.id, {
            "owner_key_id": stored.key_id, "filename": stored.filename, "purpose": stored.purpose,
            "bytes": stored.bytes}))
    return {"id": stored.id, "object": "file", "deleted": True}

"""The Batch API's logic: create, read, list, cancel, and the finalisation that writes the
output and error files from the per-line results kept in the database."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from inferd.auth.key_record import KeyRecord
from inferd.config import BatchConfig
from inferd.errors import InvalidRequest, NotFound
from inferd.store.audit import AuditEntry, AuditLog
from inferd.store.batches import KEY_REVOKED, BatchRepository
from inferd.store.db import utcnow
from inferd.store.files import FileStore, StoredFile
from inferd.worker.validate import validate_file

ENDPOINT = "/v1/chat/completions"
WINDOW = "24h"
LEASE_SECONDS = 10.0  # a crashed worker's batches are taken over this long after its last renewal
# The error code of lines that never ran, per terminal status (or the batch's `cancel_reason`).
UNRUN_CODES = {"expired": ("batch_expired", "The batch's completion window elapsed before this request ran"),
               "cancelled": ("batch_cancelled", "The batch was cancelled before this request ran"),
               KEY_REVOKED: ("key_revoked", "The batch's API key was revoked before this request ran")}


def unix(moment: datetime) -> int:
    """A naive UTC datetime as Unix seconds."""
    return int(moment.replace(tzinfo=timezone.utc).timestamp())


def owner_filter(key: KeyRecord) -> str | None:
    """The access key id a caller's files and batches are filtered by: its own, or None for an
    admin key, which sees and manages all of its org's."""
    return None if key.type == "admin" else key.access_key_id


def new_request_id() -> str:
    """A batch-scoped request id for an output or error line."""
    return "batch_req_" + secrets.token_hex(12)


def error_line(custom_id: str, code: str, message: str, status_code: int | None = None) -> bytes:
    """One error-file line."""
    error: dict[str, Any] = {"code": code, "message": message}
    if status_code is not None:
        error["status_code"] = status_code
    return orjson.dumps({"id": new_request_id(), "custom_id": custom_id, "response": None, "error": error})


def file_object(stored: StoredFile) -> dict[str, Any]:
    """The wire shape of a file."""
    return {"id": stored.id, "object": "file", "filename": stored.filename, "bytes": stored.bytes,
            "purpose": stored.purpose, "status": stored.status, "created_at": unix(stored.created_at)}


def batch_object(row: dict[str, Any], counts: dict[str, int]) -> dict[str, Any]:
    """The wire shape of a batch; cancelled and expired lines count only in `total`."""
    return {
        "id": row["id"], "object": "batch", "endpoint": row["endpoint"], "input_file_id": row["input_file_id"],
        "completion_window": row["completion_window"], "status": row["status"],
        "output_file_id": row["output_file_id"], "error_file_id": row["error_file_id"],
        "created_at": unix(row["created_at"]), "expires_at": unix(row["expires_at"]),
        "request_counts": {"total": int(row["total"]), "completed": counts.get("succeeded", 0),
                           "failed": counts.get("failed", 0)},
        "errors": orjson.loads(row["errors"]) if row["errors"] else None,
        "metadata": orjson.loads(row["metadata"]) if row["metadata"] else None,
    }


class BatchService:
    """The batch routes' work and the finalisation the worker shares."""

    def __init__(self, repo: BatchRepository, files: FileStore, config: BatchConfig) -> None:
        self.repo = repo
        self.files = files
        self.config = config

    async def render(self, row: dict[str, Any]) -> dict[str, Any]:
        """One batch with its live counts."""
        counts = await self.repo.counts([row["id"]])
        return batch_object(row, counts[row["id"]])

    async def create(self, key: KeyRecord, input_file_id: str, endpoint: str, window: str,
                     metadata: dict[str, str] | None) -> dict[str, Any]:
        """A new batch in `in_progress`; the worker validates the file."""
        if endpoint != ENDPOINT:
            raise InvalidRequest(f"endpoint: only {ENDPOINT} is supported", param="endpoint")
        if window != WINDOW:
            raise InvalidRequest(f"completion_window: only {WINDOW} is supported", param="completion_window")
        stored = await self.files.get(input_file_id, key.org_id, owner_filter(key))
        if stored is None:
            raise NotFound(f"No file '{input_file_id}'", code="file_not_found", param="input_file_id")
        if stored.purpose != "batch":
            raise InvalidRequest(f"input_file_id: file '{input_file_id}' has purpose '{stored.purpose}', "
                                 "expected 'batch'", param="input_file_id")
        now = utcnow().replace(microsecond=0)
        row = await self.repo.create({
            "id": "batch_" + uuid.uuid4().hex, "org_id": key.org_id, "key_id": key.access_key_id,
            "input_file_id": input_file_id, "endpoint": endpoint, "completion_window": window,
            "status": "in_progress", "validated": False, "total": 0,
            "metadata": orjson.dumps(metadata).decode() if metadata else None,
            "created_at": now, "expires_at": now + timedelta(seconds=self.config.window_seconds)})
        return batch_object(row, {})

    async def _visible(self, key: KeyRecord, batch_id: str) -> dict[str, Any]:
        """A batch the caller may see: its own, or any of its org's for an admin key (404 otherwise)."""
        row = await self.repo.get(batch_id, key.org_id, owner_filter(key))
        if row is None:
            raise NotFound(f"No batch '{batch_id}'", code="batch_not_found")
        return row

    async def get(self, key: KeyRecord, batch_id: str) -> dict[str, Any]:
        """A batch the caller may see (404 otherwise)."""
        return await self.render(await self._visible(key, batch_id))

    async def list_page(self, key: KeyRecord, limit: int, after: str | None) -> dict[str, Any]:
        """One page of the batches the caller may see, newest first, after the batch id `after`."""
        after_seq = None
        owner = owner_filter(key)
        if after is not None:
            cursor = await self.repo.get(after, key.org_id, owner)
            if cursor is None:
                raise InvalidRequest(f"after: no batch '{after}'", param="after")
            after_seq = int(cursor["seq"])
        rows = await self.repo.page(key.org_id, owner, limit + 1, after_seq)
        has_more = len(rows) > limit
        rows = rows[:limit]
        counts = await self.repo.counts([r["id"] for r in rows])
        data = [batch_object(r, counts[r["id"]]) for r in rows]
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": has_more}

    async def cancel(self, key: KeyRecord, batch_id: str, audit: AuditLog | None = None) -> dict[str, Any]:
        """`cancelling` while a worker runs the batch (its lines drain), else `cancelled` at once.
        An admin key's cancel of another key's batch is recorded in `audit` (`batch.cancel`)."""
        row = await self._visible(key, batch_id)
        if row["status"] in ("completed", "failed", "expired"):
            raise InvalidRequest(f"Batch '{batch_id}' is {row['status']} and cannot be cancelled",
                                 code="batch_not_cancellable")
        owner = f"api-{uuid.uuid4().hex[:12]}"
        outcome = await self.repo.request_cancel(batch_id, owner, LEASE_SECONDS)
        if audit is not None and outcome != "unchanged" and key.type == "admin" \
                and row["key_id"] != key.access_key_id:
            await audit.record(key.org_id, AuditEntry(key.access_key_id, "batch.cancel", batch_id,
                                                      {"owner_key_id": row["key_id"]}))
        if outcome == "ours":
            await self.finalise(batch_id, owner, "cancelled")
        row = await self.repo.get(batch_id)
        assert row is not None
        return await self.render(row)

    async def _load_unrun_lines(self, row: dict[str, Any], owner: str) -> None:
        """A batch cancelled or expired before a worker read its input: its lines still count in
        `request_counts.total` and go to the error file (the spec's rule for unrun lines), so
        the file is read now. A file that would have been rejected as a whole adds nothing."""
        stored = await self.files.get(row["input_file_id"])
        if stored is None:
            return
        async with self.files.local_copy(stored) as path:
            checked = await asyncio.to_thread(validate_file, path)
        if not checked.errors:
            await self.repo.store_lines(row["id"], owner, LEASE_SECONDS, checked.lines)

    async def finalise(self, batch_id: str, owner: str, status: str,
                       errors: dict[str, Any] | None = None) -> None:
        """Write the output and error files from the stored line results, then the terminal
        status, atomically. Lines that never ran go to the error file (expired, cancelled)."""
        row = await self.repo.get(batch_id)
        assert row is not None
        if status in ("expired", "cancelled") and not row["validated"]:
            await self._load_unrun_lines(row, owner)
        lines = await self.repo.all_lines(batch_id)
        reason = row["cancel_reason"] if status == "cancelled" and row["cancel_reason"] else status
        code, message = UNRUN_CODES.get(reason, ("batch_not_run", "The request did not run"))
        output: list[bytes] = []
        failed: list[bytes] = []
        for _, custom_id, state, result in lines:
            if state == "succeeded" and result is not None:
                output.append(result.encode())
            elif state == "failed" and result is not None:
                failed.append(result.encode())
            else:
                failed.append(error_line(custom_id, code, message))
        hex_id = batch_id.removeprefix("batch_")
        new_files = []
        for file_id, content, label in ((f"file-out-{hex_id}", output, "output"),
                                        (f"file-err-{hex_id}", failed, "error")):
            if content:
                path, size = await self.files.write_lines(file_id, content)
                new_files.append({"id": file_id, "org_id": row["org_id"], "key_id": row["key_id"],
                                  "filename": f"{batch_id}_{label}.jsonl",
                                  "bytes": size, "purpose": "batch_output", "status": "processed", "path": path,
                                  "created_at": utcnow().replace(microsecond=0)})
        await self.repo.finish(batch_id, owner, LEASE_SECONDS, status, new_files, self.config.retention_seconds,
                               errors)

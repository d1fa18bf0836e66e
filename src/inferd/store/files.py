"""Stored files: rows in `files`, bytes on disk under the data dir, written atomically."""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy import Select, Table, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.db import utcnow
from inferd.store.tables import files

FILES_FOLDER = "files"


def new_file_id() -> str:
    """A fresh file id."""
    return "file-" + secrets.token_hex(12)


def select_owned(table: Table, row_id: str, org_id: int | None, key_id: str | None) -> Select[Any]:
    """The row of a table of things a key owns in an org (files, batches) by its id, narrowed to an
    org's or a key's where given: what another org or key asks for reads as missing."""
    query = select(table).where(table.c.id == row_id)
    if org_id is not None:
        query = query.where(table.c.org_id == org_id)
    if key_id is not None:
        query = query.where(table.c.key_id == key_id)
    return query


@dataclass(frozen=True)
class StoredFile:
    """One file row."""

    id: str
    org_id: int
    key_id: str | None  # the owning access key id; None: admin keys of the org only (see 0006)
    filename: str
    bytes: int
    purpose: str
    status: str
    path: str
    created_at: datetime
    expires_at: datetime | None


def _file(row: object) -> StoredFile:
    m = row._mapping  # type: ignore[attr-defined]
    return StoredFile(id=m["id"], org_id=m["org_id"], key_id=m["key_id"], filename=m["filename"],
                      bytes=int(m["bytes"]),
                      purpose=m["purpose"], status=m["status"], path=m["path"], created_at=m["created_at"],
                      expires_at=m["expires_at"])


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileStore:
    """Files of every org; the bytes sit in `<data dir>/files/<id>.jsonl`, shared by replicas."""

    def __init__(self, engine: AsyncEngine, data_dir: Path) -> None:
        self._engine = engine
        self.folder = data_dir.resolve() / FILES_FOLDER
        self.folder.mkdir(parents=True, exist_ok=True)

    def absolute(self, stored: StoredFile) -> Path:
        """Where a file's bytes are."""
        return self.folder.parent / stored.path

    def temp_path(self) -> Path:
        """A fresh temporary file beside the stored ones (same filesystem, so renames are atomic)."""
        handle, name = tempfile.mkstemp(prefix=".upload-", dir=self.folder)
        os.close(handle)
        return Path(name)

    def publish(self, temp: Path, file_id: str) -> str:
        """Flush `temp` to disk and rename it into place; returns the path relative to the data dir."""
        with open(temp, "rb+") as handle:
            os.fsync(handle.fileno())
        final = self.folder / f"{file_id}.jsonl"
        os.replace(temp, final)
        _fsync_dir(self.folder)
        return f"{FILES_FOLDER}/{final.name}"

    def write_lines(self, file_id: str, lines: Iterable[bytes]) -> tuple[str, int]:
        """Write JSONL lines atomically under `file_id`; returns (relative path, size)."""
        temp = self.temp_path()
        size = 0
        with open(temp, "wb") as handle:
            for line in lines:
                handle.write(line)
                handle.write(b"\n")
                size += len(line) + 1
        return self.publish(temp, file_id), size

    async def add(self, file_id: str, org_id: int, key_id: str, filename: str, size: int, purpose: str, path: str,
                  conn: AsyncConnection | None = None, expires_at: datetime | None = None) -> StoredFile:
        """Insert a file row (its bytes already published), owned by the access key `key_id`."""
        values = dict(id=file_id, org_id=org_id, key_id=key_id, filename=filename, bytes=size, purpose=purpose,
                      status="processed", path=path, created_at=utcnow().replace(microsecond=0),
                      expires_at=expires_at)
        if conn is not None:
            await conn.execute(insert(files).values(**values))
        else:
            async with self._engine.begin() as own:
                await own.execute(insert(files).values(**values))
        return StoredFile(**values)  # type: ignore[arg-type]

    async def get(self, file_id: str, org_id: int | None = None, key_id: str | None = None) -> StoredFile | None:
        """A file, or None when missing, (with `org_id`) another org's or (with `key_id`) another key's."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select_owned(files, file_id, org_id, key_id))).first()
        return _file(row) if row else None

    async def delete(self, stored: StoredFile) -> None:
        """Remove the row, then the bytes."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(files).where(files.c.id == stored.id))
        self.absolute(stored).unlink(missing_ok=True)

    @staticmethod
    async def set_expiry(conn: AsyncConnection, file_ids: list[str], expires_at: datetime) -> None:
        """Schedule files for deletion by the retention job."""
        if file_ids:
            await conn.execute(update(files).where(files.c.id.in_(file_ids)).values(expires_at=expires_at))

    async def delete_expired(self, now: datetime) -> int:
        """Delete every file past its retention; returns how many."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(select(files).where(files.c.expires_at <= now).limit(1000))).all()
        for row in rows:
            await self.delete(_file(row))
        return len(rows)

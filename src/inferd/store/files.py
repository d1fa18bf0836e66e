"""Stored files: rows in `files`, bytes in the configured backend (`store/blobs.py`): the data
directory, the database or a bucket."""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Sequence

from sqlalchemy import Select, Table, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.config_storage import StorageConfig, storage_backend
from inferd.store.blobs import Blobs, LocalBlobs
from inferd.store.blobs_pg import DatabaseBlobs
from inferd.store.blobs_s3 import BucketBlobs
from inferd.store.db import utcnow
from inferd.store.tables import files


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


def _write_lines(path: Path, lines: Iterable[bytes]) -> int:
    size = 0
    with open(path, "wb") as handle:
        for line in lines:
            handle.write(line)
            handle.write(b"\n")
            size += len(line) + 1
    return size


async def _primed(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes] | None:
    """`chunks` with its first piece already read: None when it has none (the bytes are missing),
    so a download can answer 404 before it has sent a header."""
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        return None

    async def whole() -> AsyncIterator[bytes]:
        yield first
        async for piece in chunks:
            yield piece

    return whole()


class FileStore:
    """Files of every org: rows in `files`, bytes in the configured backend (`store/blobs.py`).
    Uploads and output files are first written to a spool file in this process's data directory
    (`<data dir>/files`), then handed to the backend whole, so a reader never sees half a file."""

    def __init__(self, engine: AsyncEngine, data_dir: Path, blobs: Blobs | None = None,
                 readers: Sequence[Blobs] = ()) -> None:
        self._engine = engine
        self.local = LocalBlobs(data_dir)
        self.folder = self.local.folder  # spool files live here (same filesystem as local bytes)
        self.blobs: Blobs = blobs or self.local  # where new files go
        self._backends: list[Blobs] = [self.blobs, *readers, self.local]

    def backend_for(self, locator: str) -> Blobs | None:
        """The backend that keeps the bytes a file row's `path` names (None: one not configured here)."""
        return next((backend for backend in self._backends if backend.owns(locator)), None)

    def local_path(self, stored: StoredFile) -> Path | None:
        """Where a file's bytes are on this machine's disk, when they are in the data directory."""
        return self.local.path(stored.path) if self.local.owns(stored.path) else None

    def temp_path(self) -> Path:
        """A fresh spool file in the data directory (same filesystem as local bytes: renames are atomic)."""
        handle, name = tempfile.mkstemp(prefix=".upload-", dir=self.folder)
        os.close(handle)
        return Path(name)

    async def publish(self, temp: Path, file_id: str) -> str:
        """Hand the finished spool file `temp` to the backend (it is consumed); the row's `path`."""
        try:
            return await self.blobs.put(file_id, temp)
        finally:
            await asyncio.to_thread(temp.unlink, True)  # a failed put leaves no spool file behind

    async def write_lines(self, file_id: str, lines: Iterable[bytes]) -> tuple[str, int]:
        """Store JSONL lines under `file_id`; returns (the row's path, size)."""
        temp = self.temp_path()
        size = await asyncio.to_thread(_write_lines, temp, lines)
        return await self.publish(temp, file_id), size

    async def open(self, stored: StoredFile) -> AsyncIterator[bytes] | None:
        """The file's bytes in pieces, or None when they are gone (or kept where this process
        cannot reach: another machine's data directory, a backend not configured here)."""
        backend = self.backend_for(stored.path)
        if backend is None:
            return None
        return await _primed(backend.chunks(stored.path))

    @asynccontextmanager
    async def local_copy(self, stored: StoredFile) -> AsyncIterator[Path]:
        """A path on this machine holding the file's bytes, for the worker's line-by-line reading:
        the file itself when local, else a spool copy written a chunk at a time and deleted on
        exit. A path that does not exist when the bytes are gone."""
        own = self.local_path(stored)
        if own is not None:
            yield own
            return
        temp = self.temp_path()
        try:
            chunks = await self.open(stored)
            if chunks is None:
                await asyncio.to_thread(temp.unlink, True)
            else:
                handle = await asyncio.to_thread(open, temp, "wb")
                try:
                    async for piece in chunks:
                        await asyncio.to_thread(handle.write, piece)
                finally:
                    handle.close()
            yield temp
        finally:
            await asyncio.to_thread(temp.unlink, True)

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
        """Remove the row, then the bytes (so no reader finds a row without them; bytes left by a
        crash between the two are harmless: nothing names them)."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(files).where(files.c.id == stored.id))
        backend = self.backend_for(stored.path)
        if backend is not None:
            await backend.remove(stored.path)

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


def build_file_store(engine: AsyncEngine, data_dir: Path, config: StorageConfig) -> FileStore:
    """The file store `[storage]` asks for: by default the database on PostgreSQL (every replica
    and worker reaches it) and the data directory on SQLite (one machine, as before). On
    PostgreSQL the database's chunks stay readable whatever the backend, so files written before a
    switch to a bucket are still served."""
    on_postgres = engine.dialect.name == "postgresql"
    backend = storage_backend(config, on_postgres)
    readers: list[Blobs] = [DatabaseBlobs(engine)] if on_postgres else []
    if backend == "s3":
        return FileStore(engine, data_dir, BucketBlobs(config), readers)
    if backend == "postgres":
        return FileStore(engine, data_dir, readers[0])
    return FileStore(engine, data_dir, None, readers)

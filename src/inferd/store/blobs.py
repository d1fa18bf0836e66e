"""Where the bytes of stored files live: one small interface, three backends.

A file's row names its bytes by `path`, a locator whose form says the backend that holds them:
`files/<id>.jsonl` in this process's data directory (`LocalBlobs`, here), `pg:<id>` in the
database (`store/blobs_pg.py`), `s3://bucket/key` in a bucket (`store/blobs_s3.py`). New files go to
the configured backend; a file keeps the locator it was written with, so files written before a
change of backend (or before `inferd files migrate` moved them) are still read from where they are.

Every backend takes a finished local file (an upload spooled to disk, or output lines written to
disk) and reads back in chunks: no file is ever held whole in memory.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import AsyncIterator, Protocol

CHUNK_BYTES = 1 << 20  # what one read or one database row holds
FILES_FOLDER = "files"


class Blobs(Protocol):
    """One place file bytes are kept."""

    def owns(self, locator: str) -> bool:
        """Whether `locator` names bytes this backend keeps."""
        ...

    async def put(self, file_id: str, source: Path) -> str:
        """Store the local file `source` under `file_id` (`source` is consumed: moved or deleted);
        the locator of the stored bytes. Storing the same id again replaces its bytes."""
        ...

    def chunks(self, locator: str) -> AsyncIterator[bytes]:
        """The bytes, in order, in pieces of at most CHUNK_BYTES: nothing at all when they are
        missing, at least one piece (maybe empty) when they exist."""
        ...

    async def remove(self, locator: str) -> None:
        """Delete the bytes (nothing when already gone)."""
        ...


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(source: Path, final: Path) -> None:
    with open(source, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(source, final)
    _fsync_dir(final.parent)


class LocalBlobs:
    """Bytes in `<data dir>/files/<id>.jsonl`, renamed into place after an fsync. Only processes
    that share the data directory see them: the backend of SQLite, and of one-machine deployments."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir.resolve()
        self.folder = self.root / FILES_FOLDER
        self.folder.mkdir(parents=True, exist_ok=True)

    def owns(self, locator: str) -> bool:
        return locator.startswith(FILES_FOLDER + "/")

    def path(self, locator: str) -> Path:
        """The file a locator names (`files/<id>.jsonl`, relative to the data directory)."""
        return self.root / locator

    async def put(self, file_id: str, source: Path) -> str:
        final = self.folder / f"{file_id}.jsonl"
        await asyncio.to_thread(_publish, source, final)  # fsyncs: off the event loop
        return f"{FILES_FOLDER}/{final.name}"

    async def chunks(self, locator: str) -> AsyncIterator[bytes]:
        try:
            handle = await asyncio.to_thread(open, self.path(locator), "rb")
        except FileNotFoundError:
            return
        try:
            piece = await asyncio.to_thread(handle.read, CHUNK_BYTES)
            yield piece  # the first, even when empty: the file exists
            while piece:
                piece = await asyncio.to_thread(handle.read, CHUNK_BYTES)
                if piece:
                    yield piece
        finally:
            handle.close()

    async def remove(self, locator: str) -> None:
        await asyncio.to_thread(self.path(locator).unlink, True)

"""File bytes in the database: `file_chunks`, 1 MiB a row (migration 0017).

A file goes in one chunk at a time, read from its local spool file in a thread, all in one
transaction (a reader never sees half a file); it comes out one chunk per query, so neither way
holds more than a chunk or two of it in memory, whatever its size.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import AsyncIterator

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.store.blobs import CHUNK_BYTES
from inferd.store.tables import file_chunks

PREFIX = "pg:"


class DatabaseBlobs:
    """Bytes in `file_chunks`, shared by every process on the database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def owns(self, locator: str) -> bool:
        return locator.startswith(PREFIX)

    async def put(self, file_id: str, source: Path) -> str:
        handle = await asyncio.to_thread(open, source, "rb")
        try:
            async with self._engine.begin() as conn:
                # A second put of the same id (a rerun of `inferd files migrate`) replaces the first.
                await conn.execute(delete(file_chunks).where(file_chunks.c.file_id == file_id))
                seq = 0
                while True:
                    piece = await asyncio.to_thread(handle.read, CHUNK_BYTES)
                    if not piece and seq > 0:
                        break
                    await conn.execute(insert(file_chunks).values(file_id=file_id, seq=seq, data=piece))
                    seq += 1
                    if not piece:
                        break  # an empty file: one empty chunk says it exists
        finally:
            handle.close()
        await asyncio.to_thread(source.unlink, True)
        return PREFIX + file_id

    async def chunks(self, locator: str) -> AsyncIterator[bytes]:
        file_id = locator.removeprefix(PREFIX)
        seq = 0
        while True:
            # One short query per chunk: no connection is held between two pieces of a download
            # that a slow client reads.
            async with self._engine.connect() as conn:
                piece = (await conn.execute(select(file_chunks.c.data).where(
                    file_chunks.c.file_id == file_id, file_chunks.c.seq == seq))).scalar()
            if piece is None:
                return
            yield bytes(piece)
            seq += 1

    async def remove(self, locator: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(delete(file_chunks).where(file_chunks.c.file_id == locator.removeprefix(PREFIX)))

"""Migration 0007: chunks stored before it are in the keyword index after it, the index follows
later inserts and deletes in the same transaction, and only the conversation's active live sources
are searched (SQLite FTS5 or PostgreSQL full-text, whichever the run uses)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import numpy as np
from sqlalchemy import delete, insert, update
from sqlalchemy.ext.asyncio import AsyncConnection

from inferd.store.db import create_engine, migrate
from inferd.store.sources import insert_chunks, keyword_ranking, link_source
from inferd.store.tables import conversation_sources, conversations, orgs, source_chunks, sources, users
from tests.harness import Backend, scratch_database, upgrade_to

NOW = datetime(2026, 1, 1)


async def _source(conn: AsyncConnection, name: str) -> int:
    result = await conn.execute(insert(sources).values(
        org_id=1, user_id=1, source_type="vectorized", source_name=name, source_config="{}", is_active=True,
        use_in_tasks=False, created_at=NOW))
    return int(result.inserted_primary_key[0])


class _Chunk:
    def __init__(self, text: str) -> None:
        self.text, self.heading, self.start, self.end = text, "", 0, len(text)


def test_old_chunks_are_indexed_and_the_index_follows_the_chunks(tmp_path: Path, backend: Backend) -> None:

    async def go(url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade_to("0006"))
                await conn.execute(insert(orgs).values(id=1, slug="o", allowed_models="*", file_attachments=True,
                                                       web_search=False, created_at=NOW))
                await conn.execute(insert(users).values(id=1, org_id=1, created_at=NOW))
                for cid in (1, 2):
                    await conn.execute(insert(conversations).values(id=cid, org_id=1, user_id=1, is_ephemeral=False,
                                                                    last_message_at=NOW, created_at=NOW))
                old = await _source(conn, "old.txt")
                await conn.execute(insert(conversation_sources).values(conversation_id=1, source_id=old,
                                                                       created_at=NOW))
                # Only the columns that exist before 0007.
                await conn.execute(insert(source_chunks), [
                    {"source_id": old, "ordinal": i, "text": text, "embedding": b"\0\0\0\0", "dim": 1}
                    for i, text in enumerate(["The spare fuse sits in locker QX-4471-B.",
                                              "Lockers are checked by the warden every week.",
                                              "Nothing else to report today."])])
            await migrate(engine)
            async with engine.begin() as conn:
                found = await keyword_ranking(conn, 1, ["QX-4471-B"], 10)
                assert len(found) == 1
                assert await keyword_ranking(conn, 1, ["lockers"], 10) != []  # stemmed: locker / lockers
                assert len(await keyword_ranking(conn, 1, ["locker", "warden"], 10)) == 2
                assert await keyword_ranking(conn, 1, ["QX-4471-C"], 10) == []
                assert await keyword_ranking(conn, 2, ["locker"], 10) == []  # another conversation
                assert await keyword_ranking(conn, 1, [], 10) == []
                # Quotes, operators and SQL in a term are matched as words, never run.
                assert await keyword_ranking(conn, 1, ['fuse" OR "x', "NEAR(", "'; DROP TABLE sources; --"], 10) == []
                assert len(await keyword_ranking(conn, 1, ["fuse"], 10)) == 1
                # A chunk inserted later is found at once, in the same transaction.
                new = await _source(conn, "new.txt")
                await link_source(conn, 2, new)
                await insert_chunks(conn, new, [_Chunk("The boiler code is ZETA-99.")],
                                    np.zeros((1, 4), np.float32))
                assert len(await keyword_ranking(conn, 2, ["ZETA-99"], 10)) == 1
            async with engine.begin() as conn:
                await conn.execute(update(sources).where(sources.c.id == new).values(is_active=False))
                assert await keyword_ranking(conn, 2, ["ZETA-99"], 10) == []  # switched off
                await conn.execute(update(sources).where(sources.c.id == new).values(is_active=True))
                await conn.execute(delete(source_chunks).where(source_chunks.c.source_id == new))
                assert await keyword_ranking(conn, 2, ["ZETA-99"], 10) == []  # deleted with its chunks
                assert len(await keyword_ranking(conn, 1, ["QX-4471-B"], 10)) == 1
        finally:
            await engine.dispose()

    with scratch_database(backend, tmp_path) as url:
        asyncio.run(go(url))

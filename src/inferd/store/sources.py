"""Sources attached to conversations: rows, conversation links and embedded chunks.

Public for the conversation routes: `sources_for_detail` (the detail's embedded sources) and
`delete_conversation_sources` (run before conversations are deleted); for retrieval
(services/retrieval.py): `active_chunk_vectors`, `keyword_ranking` and `chunk_texts`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping, Protocol, Sequence

import numpy as np
import orjson
from sqlalchemy import and_, delete, exists, func, insert, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from inferd.store.db import utcnow
from inferd.store.tables import (conversation_participants, conversation_sources, conversations, source_chunks,
                                 sources)

REDACTED = "[redacted]"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat() + "Z"


def _json_object(stored: str | None) -> dict[str, Any] | None:
    if stored is None:
        return None
    value = orjson.loads(stored)
    return value if isinstance(value, dict) else None


def _config(row: Mapping[str, Any], is_owner: bool) -> dict[str, Any]:
    """The owner sees the whole configuration; everyone else its keys with the values hidden."""
    config = _json_object(row["source_config"]) or {}
    return config if is_owner else {name: REDACTED for name in config}


def embedded_source(row: Mapping[str, Any], user_id: int) -> dict[str, Any]:
    """A source as conversation detail embeds it (spec: embedded source)."""
    is_owner = row["user_id"] == user_id
    return {"id": row["id"], "source_type": row["source_type"], "source_name": row["source_name"],
            "source_config": _config(row, is_owner), "is_active": bool(row["is_active"]),
            "use_in_tasks": bool(row["use_in_tasks"]), "handler": row["handler"],
            "source_description": row["source_description"], "is_owner": is_owner}


def source_row(row: Mapping[str, Any], user_id: int, conversation_id: int | None) -> dict[str, Any]:
    """A source as the source lists give it (spec: source row), for one conversation."""
    is_owner = row["user_id"] == user_id
    return {"id": row["id"], "source_type": row["source_type"], "source_name": row["source_name"],
            "source_config": _config(row, is_owner), "handler": row["handler"],
            "source_description": row["source_description"], "created_at": _iso(row["created_at"]),
            "updated_at": _iso(row["updated_at"]), "metadata": _json_object(row["metadata"]),
            "host_identifier": row["host_identifier"], "conversation_id": conversation_id,
            "is_active": bool(row["is_active"]), "use_in_tasks": bool(row["use_in_tasks"]), "is_owner": is_owner,
            "source_origin": row["source_origin"]}


def _reachable(user_id: int) -> Any:
    """Conversations the user owns or participates in."""
    shared = exists().where(conversation_participants.c.conversation_id == conversations.c.id,
                            conversation_participants.c.user_id == user_id)
    return or_(conversations.c.user_id == user_id, shared)


async def find_duplicate(conn: AsyncConnection, user_id: int, sha256: str) -> Mapping[str, Any] | None:
    """The user's live source with this content hash, if any."""
    found = await conn.execute(select(sources).where(sources.c.user_id == user_id, sources.c.sha256 == sha256,
                                                     sources.c.deleted_at.is_(None)).order_by(sources.c.id).limit(1))
    return found.mappings().first()


async def insert_source(conn: AsyncConnection, *, org_id: int, user_id: int, source_type: str, source_name: str,
                        source_config: dict[str, Any], sha256: str | None, metadata: dict[str, Any] | None,
                        handler: str | None = None, source_description: str | None = None,
                        source_origin: str | None = None, host_identifier: str | None = None) -> Mapping[str, Any]:
    """Store a new active source; returns its row."""
    now = utcnow()
    values = dict(org_id=org_id, user_id=user_id, source_type=source_type, source_name=source_name[:512],
                  source_config=orjson.dumps(source_config).decode(), handler=handler,
                  source_description=source_description, sha256=sha256,
                  metadata=orjson.dumps(metadata).decode() if metadata is not None else None,
                  host_identifier=host_identifier, source_origin=source_origin, is_active=True, use_in_tasks=False,
                  created_at=now, updated_at=now, deleted_at=None)
    result = await conn.execute(insert(sources).values(**values))
    return {"id": int(result.inserted_primary_key[0]), **values}


class ChunkToStore(Protocol):
    """A chunk as ingestion cuts it (services/ingest/chunk.py `Chunk`)."""

    @property
    def text(self) -> str: ...
    @property
    def heading(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


async def insert_chunks(conn: AsyncConnection, source_id: int, chunks: Sequence[ChunkToStore],
                        vectors: np.ndarray) -> None:
    """Store the chunks with their vectors as little-endian float32 blobs (the keyword index follows
    in the same transaction: see migration 0007)."""
    if not chunks:
        return
    matrix = np.ascontiguousarray(vectors, dtype="<f4")
    dim = int(matrix.shape[1])
    await conn.execute(insert(source_chunks), [
        {"source_id": source_id, "ordinal": i, "text": chunk.text, "embedding": matrix[i].tobytes(), "dim": dim,
         "heading": chunk.heading or None, "char_start": chunk.start, "char_end": chunk.end}
        for i, chunk in enumerate(chunks)])


async def link_source(conn: AsyncConnection, conversation_id: int, source_id: int) -> bool:
    """Attach the source to the conversation; False when it already was."""
    found = await conn.execute(select(conversation_sources.c.source_id).where(
        conversation_sources.c.conversation_id == conversation_id, conversation_sources.c.source_id == source_id))
    if found.first() is not None:
        return False
    await conn.execute(insert(conversation_sources).values(conversation_id=conversation_id, source_id=source_id,
                                                           created_at=utcnow()))
    return True


async def count_chunks(conn: AsyncConnection, source_id: int) -> int:
    """How many chunks a source has."""
    found = await conn.execute(select(source_chunks.c.id).where(source_chunks.c.source_id == source_id))
    return len(found.all())


async def list_sources(db: AsyncEngine, user_id: int, conversation_id: int | None = None) -> list[dict[str, Any]]:
    """Active, live sources of the conversations the user reaches (one of them when given), one row
    per (source, conversation), newest link first."""
    query = (select(sources, conversation_sources.c.conversation_id.label("link_conversation_id"))
             .select_from(conversation_sources.join(sources, sources.c.id == conversation_sources.c.source_id)
                          .join(conversations, conversations.c.id == conversation_sources.c.conversation_id))
             .where(sources.c.is_active.is_(True), sources.c.deleted_at.is_(None), _reachable(user_id))
             .order_by(conversation_sources.c.created_at.desc(), sources.c.id.desc()))
    if conversation_id is not None:
        query = query.where(conversation_sources.c.conversation_id == conversation_id)
    async with db.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
    return [source_row(row, user_id, int(row["link_conversation_id"])) for row in rows]


def _live_links() -> Any:
    return (conversation_sources.join(sources, sources.c.id == conversation_sources.c.source_id),
            (sources.c.is_active.is_(True), sources.c.deleted_at.is_(None)))


async def sources_for_detail(db: AsyncEngine, conversation_id: int, user_id: int) -> list[dict[str, Any]]:
    """The embedded `sources[]` of a conversation's detail: its active, live sources, oldest link
    first, `source_config` redacted unless `user_id` owns the source. The caller has already checked
    that the user may read the conversation."""
    joined, live = _live_links()
    query = (select(sources).select_from(joined)
             .where(conversation_sources.c.conversation_id == conversation_id, *live)
             .order_by(conversation_sources.c.created_at, sources.c.id))
    async with db.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
    return [embedded_source(row, user_id) for row in rows]


async def active_source_counts(db: AsyncEngine, conversation_ids: Sequence[int]) -> dict[int, int]:
    """How many active, live sources each conversation has (absent: none)."""
    if not conversation_ids:
        return {}
    joined, live = _live_links()
    query = (select(conversation_sources.c.conversation_id, func.count()).select_from(joined)
             .where(conversation_sources.c.conversation_id.in_(list(conversation_ids)), *live)
             .group_by(conversation_sources.c.conversation_id))
    async with db.connect() as conn:
        return {int(cid): int(n) for cid, n in (await conn.execute(query)).all()}


class ConversationSources:
    """The sources side of conversations (services/conversations.py `SourceDirectory`)."""

    def __init__(self, db: AsyncEngine) -> None:
        self._db = db

    async def for_conversation(self, conversation_id: int, user_id: int) -> list[dict[str, Any]]:
        """The detail's embedded sources."""
        return await sources_for_detail(self._db, conversation_id, user_id)

    async def counts(self, conversation_ids: Sequence[int]) -> dict[int, int]:
        """Active sources per conversation, for list items' `source_count`."""
        return await active_source_counts(self._db, conversation_ids)


async def source_reachable(db: AsyncEngine, source_id: int, user_id: int) -> Mapping[str, Any] | None:
    """The live source when the user owns it or reaches a conversation it is attached to."""
    linked = exists().where(conversation_sources.c.source_id == sources.c.id,
                            conversation_sources.c.conversation_id == conversations.c.id, _reachable(user_id))
    query = select(sources).where(sources.c.id == source_id, sources.c.deleted_at.is_(None),
                                  or_(sources.c.user_id == user_id, linked))
    async with db.connect() as conn:
        return (await conn.execute(query)).mappings().first()


async def update_source(db: AsyncEngine, source_id: int, changes: dict[str, bool]) -> Mapping[str, Any]:
    """Apply `is_active` / `use_in_tasks` changes; returns the updated row."""
    async with db.begin() as conn:
        if changes:
            await conn.execute(update(sources).where(sources.c.id == source_id).values(**changes, updated_at=utcnow()))
        return (await conn.execute(select(sources).where(sources.c.id == source_id))).mappings().one()


async def delete_conversation_sources(conn: AsyncConnection, conversation_ids: Iterable[int]) -> None:
    """Detach every source from these conversations, then delete the sources (rows and vectors) no
    other conversation still uses. Call inside the transaction that deletes the conversations,
    before deleting them (the links reference conversations)."""
    ids = list(conversation_ids)
    if not ids:
        return
    linked = {int(r[0]) for r in await conn.execute(
        select(conversation_sources.c.source_id).where(conversation_sources.c.conversation_id.in_(ids)))}
    await conn.execute(delete(conversation_sources).where(conversation_sources.c.conversation_id.in_(ids)))
    if not linked:
        return
    still_used = {int(r[0]) for r in await conn.execute(
        select(conversation_sources.c.source_id).where(conversation_sources.c.source_id.in_(linked)))}
    orphans = list(linked - still_used)
    if orphans:
        await conn.execute(delete(source_chunks).where(source_chunks.c.source_id.in_(orphans)))
        await conn.execute(delete(sources).where(sources.c.id.in_(orphans)))


async def active_chunk_vectors(conn: AsyncConnection, conversation_id: int
                               ) -> tuple[list[int], np.ndarray, list[int]]:
    """Chunk ids, their vectors (rows) and dimensions, for the active live sources of a conversation."""
    query = (select(source_chunks.c.id, source_chunks.c.embedding, source_chunks.c.dim)
             .select_from(source_chunks.join(sources, sources.c.id == source_chunks.c.source_id)
                          .join(conversation_sources, and_(conversation_sources.c.source_id == sources.c.id,
                                                           conversation_sources.c.conversation_id == conversation_id)))
             .where(sources.c.is_active.is_(True), sources.c.deleted_at.is_(None)))
    rows = (await conn.execute(query)).all()
    ids = [int(r[0]) for r in rows]
    dims = [int(r[2]) for r in rows]
    if not rows:
        return ids, np.zeros((0, 0), np.float32), dims
    width = max(dims)
    matrix = np.zeros((len(rows), width), np.float32)
    for i, row in enumerate(rows):
        matrix[i, :dims[i]] = np.frombuffer(row[1], dtype="<f4")
    return ids, matrix, dims


_LIVE_CHUNKS_OF = ("FROM {chunks} JOIN sources s ON s.id = c.source_id "
                   "JOIN conversation_sources cs ON cs.source_id = s.id AND cs.conversation_id = :conversation_id "
                   "WHERE s.is_active AND s.deleted_at IS NULL")


async def keyword_ranking(conn: AsyncConnection, conversation_id: int, terms: Sequence[str],
                          limit: int) -> list[int]:
    """Ids of the chunks of a conversation's active live sources that hold any of `terms` (words, or
    codes such as `QX-4471-B` matched as a phrase of their parts), best first: BM25 on SQLite FTS5,
    `ts_rank_cd` on PostgreSQL full-text search. Terms are bound or quoted, never spliced raw."""
    if not terms or limit <= 0:
        return []
    params: dict[str, Any] = {"conversation_id": conversation_id, "limit": limit}
    if conn.dialect.name == "sqlite":
        params["match"] = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        live = _LIVE_CHUNKS_OF.format(chunks="source_chunks_fts f JOIN source_chunks c ON c.id = f.rowid")
        sql = f"SELECT c.id {live} AND source_chunks_fts MATCH :match ORDER BY bm25(source_chunks_fts) LIMIT :limit"
    else:
        params.update({f"t{i}": term for i, term in enumerate(terms)})
        query = " || ".join(f"plainto_tsquery('english', :t{i})" for i in range(len(terms)))
        live = _LIVE_CHUNKS_OF.format(chunks=f"source_chunks c CROSS JOIN (SELECT {query} AS query) q")
        sql = f"SELECT c.id {live} AND c.text_search @@ q.query ORDER BY ts_rank_cd(c.text_search, q.query) DESC, " \
              "c.id LIMIT :limit"
    return [int(row[0]) for row in await conn.execute(text(sql), params)]


async def chunk_texts(conn: AsyncConnection, chunk_ids: list[int]) -> dict[int, Mapping[str, Any]]:
    """Chunk id -> its text, ordinal, heading, span in the document and source (id and name)."""
    if not chunk_ids:
        return {}
    query = (select(source_chunks.c.id, source_chunks.c.text, source_chunks.c.ordinal, source_chunks.c.heading,
                    source_chunks.c.char_start, source_chunks.c.char_end, sources.c.id.label("source_id"),
                    sources.c.source_name)
             .select_from(source_chunks.join(sources, sources.c.id == source_chunks.c.source_id))
             .where(source_chunks.c.id.in_(chunk_ids)))
    return {int(row["id"]): row for row in (await conn.execute(query)).mappings()}

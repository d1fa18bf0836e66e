"""Vectorize one uploaded file into a conversation: hash, deduplicate, extract, chunk, embed, store.

The uploaded bytes live only in a temporary file that is deleted as soon as the text is out (the
route deletes it in every other case). The embedding is billed like an embeddings call, to the key
that pays for the user key, in workspace `conversations`.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from inferd.auth.key_record import KeyRecord
from inferd.calls.stage import Billing
from inferd.services.ingest.chunk import CHUNK_CHARS, CHUNK_TOKENS, OVERLAP_CHARS, OVERLAP_TOKENS, chunk_document
from inferd.services.embeddings import embed_texts, embedding_model_of
from inferd.services.ingest.extract import MAX_CHARS, check_extension, extract_text
from inferd.services.ingest.isolated import EXTRACT_TIMEOUT_S
from inferd.store import sources as store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from inferd.calls.stage import CallStage
    from inferd.catalogue import ModelCatalogue
    from inferd.services.conversations import ConversationService

DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"
WORKSPACE = "conversations"


@dataclass(frozen=True)
class Ingestion:
    """What ingesting an upload works with: the database, the catalogue and the call stage (the
    embedder), the conversations, and the `[conversations]` settings."""

    db: "AsyncEngine"
    catalogue: "ModelCatalogue"
    stage: "CallStage"
    conversations: "ConversationService"
    settings: Mapping[str, Any]


@dataclass
class Vectorized:
    """What the route answers: 201 for a new source, 200 for a duplicate."""

    status: int
    body: dict[str, Any]


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file, read in pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while piece := handle.read(1 << 20):
            digest.update(piece)
    return digest.hexdigest()


def extract_timeout(ing: "Ingestion") -> float:
    """How long one PDF or office document may take to read (`[conversations] extract_timeout_s`)."""
    return float(ing.settings.get("extract_timeout_s", EXTRACT_TIMEOUT_S))


def embedding_model(settings: Mapping[str, Any]) -> str:
    """`[conversations] embedding_model` of the `[conversations]` settings."""
    return str(settings.get("embedding_model") or DEFAULT_EMBEDDING_MODEL)


async def _conversation(ing: "Ingestion", key: KeyRecord, requested: int, ephemeral: bool) -> int:
    """The requested conversation when the user reaches it; otherwise a new one (id 0, negative or
    unknown; someone else's conversation is treated as unknown, so its existence never shows)."""
    assert key.user_id is not None
    if requested > 0:
        found = await ing.conversations.store.access(requested, key.user_id)
        if found is not None and found.conversation["org_id"] == key.org_id:
            return requested
    created = await ing.conversations.store.create(org_id=key.org_id, user_id=key.user_id, is_ephemeral=ephemeral,
                                                   conversation_type="chat")
    return int(created["id"])


def _answer(status: int, conversation_id: int, source: Mapping[str, Any], user_id: int, chunks: int) -> Vectorized:
    return Vectorized(status, {"success": True, "conversation_id": conversation_id,
                               "source": store.source_row(source, user_id, conversation_id),
                               "total": {"chunks": chunks, "duplicate": status == 200}})


async def _link_duplicate(ing: "Ingestion", key: KeyRecord, requested: int, ephemeral: bool,
                          digest: str) -> Vectorized | None:
    assert key.user_id is not None
    async with ing.db.connect() as conn:
        existing = await store.find_duplicate(conn, key.user_id, digest)
    if existing is None:
        return None
    conversation_id = await _conversation(ing, key, requested, ephemeral)
    async with ing.db.begin() as conn:
        await store.link_source(conn, conversation_id, existing["id"])
        chunks = await store.count_chunks(conn, existing["id"])
    return _answer(200, conversation_id, existing, key.user_id, chunks)


async def vectorize(ing: "Ingestion", key: KeyRecord, requested: int, path: Path, filename: str, size: int,
                    ephemeral: bool) -> Vectorized:
    """Ingest the uploaded file at `path` into conversation `requested` (or a new one) for the key's
    user. The file is deleted once its text is out; the caller deletes it on every other path."""
    assert key.user_id is not None
    filename = filename.replace("\\", "/").rsplit("/", 1)[-1] or "upload"
    extension = check_extension(filename)
    digest = await asyncio.to_thread(sha256_file, path)
    duplicate = await _link_duplicate(ing, key, requested, ephemeral, digest)
    if duplicate is not None:
        return duplicate
    model = embedding_model(ing.settings)
    embedder = embedding_model_of(ing.catalogue, model, key)
    try:
        extracted = await asyncio.to_thread(extract_text, path, filename, extract_timeout(ing))
    finally:
        path.unlink(missing_ok=True)  # the uploaded bytes are not kept
    chunks = chunk_document(extracted.text)
    embedded = await embed_texts(ing.stage, Billing(key, WORKSPACE), embedder, [chunk.text for chunk in chunks])
    dimensions = int(embedded.vectors.shape[1])
    config = {"file_name": filename, "sha256": digest, "size_bytes": size, "embedding_model": embedder.id,
              "dimensions": dimensions, "chunk_chars": CHUNK_CHARS, "chunk_overlap": OVERLAP_CHARS,
              "chunk_tokens": CHUNK_TOKENS, "chunk_overlap_tokens": OVERLAP_TOKENS}
    metadata = {"file_name": filename, "extension": extension, "size_bytes": size,
                "characters": len(extracted.text), "truncated": extracted.truncated, "max_characters": MAX_CHARS,
                "chunks": len(chunks), "embedding_model": embedder.id, "prompt_tokens": embedded.prompt_tokens}
    conversation_id = await _conversation(ing, key, requested, ephemeral)
    async with ing.db.begin() as conn:
        # Two uploads of the same file may race; the second one links the first one's source.
        existing = await store.find_duplicate(conn, key.user_id, digest)
        if existing is not None:
            await store.link_source(conn, conversation_id, existing["id"])
            return _answer(200, conversation_id, existing, key.user_id, await store.count_chunks(conn, existing["id"]))
        source = await store.insert_source(
            conn, org_id=key.org_id, user_id=key.user_id, source_type="vectorized", source_name=filename,
            source_config=config, sha256=digest, metadata=metadata, handler="vectorize",
            source_description=f"Uploaded file {filename}, {len(chunks)} chunks", source_origin="upload")
        await store.insert_chunks(conn, source["id"], chunks, embedded.vectors)
        await store.link_source(conn, conversation_id, source["id"])
    return _answer(201, conversation_id, source, key.user_id, len(chunks))

"""Sources wired into conversations: the detail's embedded sources and list counts, the delete
hook that removes links and vectors, and the ephemeral purge job (started with the server)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from inferd.services.conversations import ConversationService
from inferd.services.purge import DEFAULT_TTL_SECONDS, EphemeralPurge
from inferd.store.sources import ConversationSources, delete_conversation_sources

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


def attach_sources(conversations: ConversationService, db: "AsyncEngine") -> ConversationService:
    """Give the conversation service its sources and its delete hook; returns it."""
    conversations.sources = ConversationSources(db)
    conversations.store.delete_hooks.append(delete_conversation_sources)
    return conversations


def start_purge(conversations: ConversationService, settings: Mapping[str, Any]) -> EphemeralPurge:
    """Start the ephemeral purge with `[conversations] ephemeral_ttl_seconds` (of `settings`)."""
    ttl = float(settings.get("ephemeral_ttl_seconds", DEFAULT_TTL_SECONDS))
    purge = EphemeralPurge(conversations.store.delete_older_ephemeral, ttl)
    purge.start()
    return purge

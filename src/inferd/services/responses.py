"""Stored responses around the chat corridor (CONTRACT.md decision 21): the conversation a
`previous_response_id` continues, keeping a response for its key, and the 30-day retention job."""

from __future__ import annotations

from typing import Any

from inferd.errors import NotFound
from inferd.protocol.responses_items import output_as_input
from inferd.protocol.responses_mapping import Translated
from inferd.services.purge import EphemeralPurge
from inferd.store.keys import KeyRecord
from inferd.store.responses import RETENTION_SECONDS, ResponseRepository, StoredResponse


def not_found(response_id: str, param: str | None = None) -> NotFound:
    """404 for a response the key cannot see (another key's is answered the same as none)."""
    return NotFound(f"No response with id '{response_id}'", code="response_not_found", param=param)


class ResponsesService:
    """What the Responses API keeps between calls: stored responses, per key."""

    def __init__(self, store: ResponseRepository) -> None:
        self.store = store

    async def history(self, key: KeyRecord, previous_response_id: str | None) -> list[dict[str, Any]]:
        """The input items a continuation comes after: the earlier response's own input (its
        earlier turns first) and its output (404 when the key has no such response)."""
        if previous_response_id is None:
            return []
        previous = await self.store.get(previous_response_id, key.access_key_id)
        if previous is None:
            raise not_found(previous_response_id, "previous_response_id")
        return [*previous.input_items, *output_as_input(previous.response.get("output") or [])]

    async def keep(self, key: KeyRecord, translated: Translated, history: list[dict[str, Any]],
                   response: dict[str, Any]) -> None:
        """Store the response (when the request asked to) with the whole conversation it answered."""
        if translated.store:
            await self.store.save(StoredResponse(response["id"], key.access_key_id,
                                                 [*history, *translated.input_items], response))

    async def get(self, key: KeyRecord, response_id: str) -> dict[str, Any]:
        """The key's stored response object (404 otherwise)."""
        stored = await self.store.get(response_id, key.access_key_id)
        if stored is None:
            raise not_found(response_id)
        return stored.response

    async def delete(self, key: KeyRecord, response_id: str) -> None:
        """Delete the key's stored response (404 otherwise)."""
        if not await self.store.delete(response_id, key.access_key_id):
            raise not_found(response_id)

    def start_retention(self) -> EphemeralPurge:
        """Start the job that deletes responses older than 30 days (checking every minute)."""
        job = EphemeralPurge(self.store.delete_older, RETENTION_SECONDS, "stored responses")
        job.start()
        return job

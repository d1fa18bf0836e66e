"""Stored responses around the chat corridor: the conversation a
`previous_response_id` continues, keeping a response for its key, and the 30-day retention job.

A stored response keeps its own turn and the id of the one it continued; the conversation is the
chain of those turns, read back in one walk (store/responses.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.auth.key_record import KeyRecord
from inferd.dialects.responses_items import output_as_input
from inferd.dialects.responses_mapping import Translated
from inferd.errors import NotFound
from inferd.services.purge import EphemeralPurge
from inferd.store.responses import CHAIN_LIMIT, RETENTION_SECONDS, ResponseRepository, StoredResponse


def not_found(response_id: str, param: str | None = None) -> NotFound:
    """404 for a response the key cannot see (another key's is answered the same as none)."""
    return NotFound(f"No response with id '{response_id}'", code="response_not_found", param=param)


@dataclass(frozen=True)
class History:
    """The conversation a request continues: its items (oldest first), the response it continues,
    and how many stored rows that conversation spans."""

    items: list[dict[str, Any]] = field(default_factory=list)
    previous_id: str | None = None
    rows: int = 0


NO_HISTORY = History()


class ResponsesService:
    """What the Responses API keeps between calls: stored responses, per key."""

    def __init__(self, store: ResponseRepository) -> None:
        self.store = store

    async def history(self, key: KeyRecord, previous_response_id: str | None) -> History:
        """The input items a continuation comes after: every earlier turn's input and output,
        oldest first (404 when the key has no such response, or a turn of it is no longer kept)."""
        if previous_response_id is None:
            return NO_HISTORY
        chain = await self.store.chain(previous_response_id, key.access_key_id)
        if not chain:
            raise not_found(previous_response_id, "previous_response_id")
        if chain[-1].previous_id is not None:  # a link of another key, or removed while continued
            raise NotFound(f"Response '{previous_response_id}' continues a conversation that is no longer "
                           "stored whole", code="response_not_found", param="previous_response_id")
        items: list[dict[str, Any]] = []
        for turn in reversed(chain):
            items += turn.input_items
            items += output_as_input(turn.response.get("output") or [])
        return History(items, previous_response_id, len(chain))

    async def keep(self, key: KeyRecord, translated: Translated, history: History, response: dict[str, Any]) -> None:
        """Store the response (when the request asked to): its own input and the response it
        continued, or, once that chain is `CHAIN_LIMIT` rows long, the whole conversation (so no
        walk reads more)."""
        if not translated.store:
            return
        if history.rows >= CHAIN_LIMIT:
            stored = StoredResponse(response["id"], key.access_key_id, [*history.items, *translated.input_items],
                                    response)
        else:
            stored = StoredResponse(response["id"], key.access_key_id, translated.input_items, response,
                                    history.previous_id)
        await self.store.save(stored)

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

"""The ephemeral purge job, running inside the server with `[conversations] ephemeral_ttl_seconds`
of a few seconds: ephemeral conversations go with their sources and vectors; others stay."""

from __future__ import annotations

import time

import httpx

from tests.harness import Server
from tests.sources.conftest import EPHEMERAL_TTL_SECONDS, User, count_rows, upload


def test_ephemeral_conversations_are_purged_after_the_ttl(sources_server: Server, alice: User) -> None:
    ephemeral = upload(alice, "scratch.txt", b"a scratch note for a throwaway chat", ephemeral=True).json()
    kept = upload(alice, "keep.txt", b"a note in a conversation that stays", ephemeral=False).json()
    conversation_id, source_id = ephemeral["conversation_id"], ephemeral["source"]["id"]
    detail = httpx.get(f"{sources_server.v1}/conversations/{conversation_id}", headers=alice.headers)
    assert detail.status_code == 200 and detail.json()["conversation"]["is_ephemeral"] is True
    message = httpx.post(f"{sources_server.v1}/conversations/{conversation_id}/messages", headers=alice.headers,
                         json={"message": "what does the note say?"})
    assert message.status_code == 201, message.text
    assert count_rows(sources_server, "source_chunks", source_id=source_id) == 1
    started = time.monotonic()
    while time.monotonic() - started < EPHEMERAL_TTL_SECONDS + 15:
        gone = httpx.get(f"{sources_server.v1}/conversations/{conversation_id}", headers=alice.headers)
        if gone.status_code == 404:
            break
        time.sleep(0.2)
    assert gone.status_code == 404
    # Purged within the ttl plus one check interval (ttl / 5), with a margin for a busy machine.
    assert time.monotonic() - started < EPHEMERAL_TTL_SECONDS + EPHEMERAL_TTL_SECONDS / 5 + 5
    assert count_rows(sources_server, "conversation_messages", conversation_id=conversation_id) == 0
    assert count_rows(sources_server, "conversation_sources", conversation_id=conversation_id) == 0
    assert count_rows(sources_server, "source_chunks", source_id=source_id) == 0
    assert count_rows(sources_server, "sources", id=source_id) == 0
    stays = httpx.get(f"{sources_server.v1}/conversations/{kept['conversation_id']}", headers=alice.headers)
    assert stays.status_code == 200 and stays.json()["conversation"]["is_ephemeral"] is False
    assert [row["source_name"] for row in httpx.get(f"{sources_server.v1}/sources", headers=alice.headers
                                                    ).json()["body"]] == ["keep.txt"]


def test_ephemeral_only_marks_conversations_the_server_creates(sources_server: Server, alice: User) -> None:
    existing = upload(alice, "base.txt", b"base document").json()["conversation_id"]
    again = upload(alice, "extra.txt", b"extra document", conversation_id=existing, ephemeral=True)
    assert again.status_code == 201 and again.json()["conversation_id"] == existing
    time.sleep(EPHEMERAL_TTL_SECONDS + 2)
    detail = httpx.get(f"{sources_server.v1}/conversations/{existing}", headers=alice.headers)
    assert detail.status_code == 200 and detail.json()["conversation"]["is_ephemeral"] is False

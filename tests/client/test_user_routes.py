"""inferd_client on the key exchange (both shapes), the conversation and source routes (user keys,
application envelope errors) and the usage reports, against the real server."""

from __future__ import annotations

import time
import uuid
from datetime import date, timedelta

import jwt
import pytest

from inferd_client import (AuthenticationError, BadRequestError, Client, Conversation, ConversationMessage,
                           GenerateChunk, GenerateStart, NotFoundError, PermissionDeniedError, RetryPolicy,
                           StreamError)
from tests.client.conftest import IDP_AUDIENCE, IDP_ISSUER, IDP_SECRET
from tests.fakes.upstream import REPLY_WORDS
from tests.harness import Server

HELLO = [{"role": "user", "content": "Hello there"}]


def idp_token(sub: str, email: str, **claims: object) -> str:
    now = int(time.time())
    # email_verified: invitations by email reach the subject only when its idp vouches for the address.
    payload = {"iss": IDP_ISSUER, "aud": IDP_AUDIENCE, "sub": sub, "email": email, "email_verified": True,
               "given_name": "Ada", "family_name": "L", "iat": now, "exp": now + 300, **claims}
    return jwt.encode(payload, IDP_SECRET, algorithm="HS256")


def client_for(server: Server, key: str) -> Client:
    return Client(server.base_url, key, timeout=30, retry=RetryPolicy(sleep=lambda s: None))


def test_exchange_shape_a_and_b(client_server: Server) -> None:
    org = f"org-{uuid.uuid4().hex[:8]}"
    with client_for(client_server, client_server.create_key(org=org)) as app:
        minted = app.exchange(idp_token=idp_token("user-a", "a@example.com"), ttl_seconds=10)
        assert minted.full_key and minted.bearer == minted.full_key
        assert minted.full_key == f"{minted.access_key_id}:{minted.secret}"
        assert minted.expires_at and minted.org_id is not None and minted.raw["success"] is True
        with pytest.raises(AuthenticationError) as bad:
            app.exchange(idp_token=idp_token("user-a", "a@example.com", aud="someone-else"))
        assert bad.value.status == 401
    with client_for(client_server, client_server.create_key(org=org, user_email="b@example.com")) as owned:
        shape_b = owned.exchange(api_key=client_server.create_key(org=org, user_email="b@example.com"))
        assert shape_b.user_key and shape_b.bearer == shape_b.user_key and shape_b.expires_at
    with client_for(client_server, client_server.create_key(org=org, key_type="admin")) as admin:
        with pytest.raises(PermissionDeniedError):
            admin.exchange(idp_token=idp_token("user-a", "a@example.com"))
    with client_for(client_server, minted.bearer) as user:
        assert user.list_conversations().body == []


def test_conversation_routes(client_server: Server) -> None:
    org = f"org-{uuid.uuid4().hex[:8]}"
    with client_for(client_server, client_server.create_key(org=org)) as app:
        alice = client_for(client_server, app.exchange(idp_token=idp_token("alice", "alice@example.com")).bearer)
        bob = client_for(client_server, app.exchange(idp_token=idp_token("bob", "bob@example.com")).bearer)
        with pytest.raises(PermissionDeniedError) as refused:
            app.list_conversations()  # an application key on a user route: application envelope
        assert refused.value.code == "user_key_required" and refused.value.message
    with alice, bob:
        created = alice.create_conversation(title="Trip", cloud_agent_task_id=None)
        assert isinstance(created, Conversation) and created.title == "Trip" and created.id > 0
        first = alice.add_message(created.id, "Where to?")
        assert isinstance(first, ConversationMessage) and first.role == "user" and first.message == "Where to?"
        second = alice.add_message(created.id, "Paris?")
        assert second.parent_message_id == first.id
        branch = alice.add_message(created.id, "Rome?", parent_message_id=first.id)  # a sibling of `second`
        assert branch.parent_message_id == first.id and branch.active_sibling_message is True

        listed = alice.list_conversations()
        assert [c.id for c in listed.body] == [created.id]
        assert listed.body[0].messages and listed.body[0].messages[0].message == "Rome?"
        assert isinstance(listed.types, list)
        detail = alice.get_conversation(created.id, limit=5)
        assert detail.id == created.id and [m.message for m in detail.messages] == ["Where to?", "Rome?"]
        assert sorted(detail.messages[1].sibling_ids) == sorted([second.id, branch.id])
        assert detail.participants and detail.sources == []

        with pytest.raises(NotFoundError):
            bob.get_conversation(created.id)  # not shared yet: it does not exist for bob
        shared = alice.add_participant(created.id, "bob@example.com", "admin")
        assert shared.email == "bob@example.com" and shared.role == "admin"
        assert bob.get_conversation(created.id).title == "Trip"

        renamed = alice.update_conversation(created.id, title="Paris", archived=True)
        assert renamed.title == "Paris" and renamed.archived_at is not None
        assert alice.list_conversations().body == []
        assert [c.id for c in alice.list_conversations(archived=True).body] == [created.id]

        sources = alice.conversation_sources(created.id)
        assert sources.body == [] and sources.total == 0
        assert alice.list_sources().body == []

        with pytest.raises(BadRequestError) as bad_id:
            alice.get_conversation("not an id!")
        assert bad_id.value.status == 400 and bad_id.value.body["success"] is False
        with pytest.raises(NotFoundError):
            alice.update_source(999_999, is_active=False)

        deleted = bob.delete_conversations([created.id, 987_654])
        assert deleted.deleted_ids == [created.id] and deleted.skipped_ids == [987_654]
        with pytest.raises(NotFoundError):
            alice.get_conversation(created.id)


def test_usage_reports(server: Server) -> None:
    key = server.create_key()
    with client_for(server, key) as client:
        client.chat("mock-chat", HELLO, metadata={"team": "a"})
        client.chat("mock-chat", HELLO, metadata={"team": "b"})
        client.embeddings("mock-embed", "x")
        page = client.usage()
        assert len(page.data) == 3 and page.pagination.limit == 100 and page.pagination.has_more is False
        assert page.pagination.from_ and page.pagination.to
        assert page.data[0].workspace == "embeddings" and page.data[0].id > page.data[1].id  # newest first
        assert page.data[1].metadata == {"team": "b"} and page.data[1].cost_usd > 0
        tagged = client.usage(metadata={"team": "a"}, model="mock-chat", from_=date.today() - timedelta(days=1),
                              to=date.today() + timedelta(days=1), limit=1)
        assert [r.metadata for r in tagged.data] == [{"team": "a"}] and tagged.pagination.has_more is True
        summary = client.usage_summary("workspace")
        assert summary.group_by == "workspace"
        assert {g.group_value: g.requests for g in summary.data} == {"chat": 2, "embeddings": 1}
        chat = next(g for g in summary.data if g.group_value == "chat")
        assert chat.total_tokens == chat.prompt_tokens + chat.completion_tokens
        by_team = client.usage_summary("metadata.team")
        assert {g.group_value for g in by_team.data} == {"a", "b", None}
        with pytest.raises(BadRequestError):
            client.usage_summary("colour")
        with pytest.raises(BadRequestError):
            client.usage(metadata="{not json")


def test_vectorize_and_sources(client_server: Server) -> None:
    org = f"org-{uuid.uuid4().hex[:8]}"
    with client_for(client_server, client_server.create_key(org=org)) as app:
        user = client_for(client_server, app.exchange(idp_token=idp_token("carol", "carol@example.com")).bearer)
    with user:
        notes = b"Paris is the capital of France. The Seine runs through it.\n" * 20
        first = user.vectorize(0, ("notes.txt", notes), ephemeral=False)
        assert first.created and not first.duplicate and first.conversation_id
        assert first.source is not None and first.source.source_name == "notes.txt" and first.source.is_owner
        again = user.vectorize(first.conversation_id, ("copy.txt", notes))
        assert not again.created and again.duplicate and again.conversation_id == first.conversation_id
        attached = user.conversation_sources(first.conversation_id)
        assert [s.id for s in attached.body] == [first.source.id] and attached.total == 1
        assert [s.id for s in user.list_sources().body] == [first.source.id]
        switched = user.update_source(first.source.id, is_active=False)
        assert switched.is_active is False
        assert user.conversation_sources(first.conversation_id).body == []
        with pytest.raises(BadRequestError):
            user.vectorize(0, ("old.doc", b"legacy"))


def test_generate_stream(client_server: Server) -> None:
    org = f"org-{uuid.uuid4().hex[:8]}"
    with client_for(client_server, client_server.create_key(org=org)) as app:
        user = client_for(client_server, app.exchange(idp_token=idp_token("dan", "dan@example.com")).bearer)
    with user:
        conversation = user.create_conversation(title="Greetings")
        asked = user.add_message(conversation.id, "Say hello")
        with user.generate(conversation.id, asked.id, model="mock-chat", thinking=False) as stream:
            frames = list(stream)
        assert isinstance(frames[0], GenerateStart)
        assert (frames[0].conversation_id, frames[0].title) == (conversation.id, "Greetings")
        text = "".join(f.chunk for f in frames if isinstance(f, GenerateChunk))
        assert text.split() == REPLY_WORDS
        thread = user.get_conversation(conversation.id)
        assert [m.role for m in thread.messages] == ["user", "assistant"]
        assert thread.messages[-1].message == text and thread.messages[-1].finish_reason == "stop"

        again = user.add_message(conversation.id, "And again")
        seen: list[object] = []
        with pytest.raises(StreamError) as broke:
            for frame in user.generate(conversation.id, again.id, model="mock-stall"):
                seen.append(frame)
        assert broke.value.code == "timeout" and isinstance(seen[0], GenerateStart)
        with pytest.raises(NotFoundError):
            user.generate(conversation.id, 999_999, model="mock-chat")

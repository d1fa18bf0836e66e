"""inferd_client against the real server (the fake upstream behind it): every inference route,
typed results, and the error tree mapped from real error responses."""

from __future__ import annotations

import asyncio
import base64
import struct
from pathlib import Path

import pytest

from inferd_client import (AsyncClient, AuthenticationError, BadRequestError, BudgetExceededError,
                           ChatCompletion, Client, NotFoundError, PermissionDeniedError, RetryPolicy, StreamError,
                           Transcription)
from tests.fakes.upstream import REPLY_WORDS, count_prompt_tokens
from tests.harness import Server, Upstream

HELLO = [{"role": "user", "content": "Hello there"}]
PROMPT = count_prompt_tokens({"messages": HELLO})


def test_chat_blocking(client: Client, server: Server, app_key: str, upstream: Upstream) -> None:
    reply = client.chat("fast", HELLO, temperature=0.2, logit_bias={"1": 2}, metadata={"team": "client"})
    assert isinstance(reply, ChatCompletion)
    assert reply.text == " ".join(REPLY_WORDS) and reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage is not None and (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (
        PROMPT, len(REPLY_WORDS))
    assert reply.object == "chat.completion" and reply["id"] == reply.id
    sent = upstream.last_chat_body()
    assert sent["temperature"] == 0.2 and sent["logit_bias"] == {"1": 2} and "metadata" not in sent
    row = server.usage_rows(app_key)[-1]
    assert row["model"] == "mock-chat" and row["metadata"] == '{"team":"client"}'


def test_chat_stream_ends_with_usage(client: Client) -> None:
    with client.chat_stream("mock-chat", HELLO) as stream:
        chunks = list(stream)
    assert "".join(c.text for c in chunks) == " ".join(REPLY_WORDS)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(REPLY_WORDS)
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[0].choices[0].delta.role == "assistant"


def test_reasoning_is_typed(client: Client, upstream: Upstream) -> None:
    # The fake upstream's mock-reasoning sends `reasoning_content` "thinking about it" in a blocking
    # reply and one "thinking" delta before the words in a stream; the server names it `reasoning`.
    reply = client.chat("mock-reason", HELLO)
    assert upstream.last_chat_body()["model"] == "mock-reasoning"
    message = reply.choices[0].message
    assert message.reasoning == "thinking about it" and message.content == " ".join(REPLY_WORDS)
    with client.chat_stream("mock-reason", HELLO) as stream:
        chunks = list(stream)
    assert [c.choices[0].delta.reasoning for c in chunks if c.choices and c.choices[0].delta.reasoning] == [
        "thinking"]
    assert "".join(c.text for c in chunks) == " ".join(REPLY_WORDS)


def test_mid_stream_timeout_is_a_stream_error(client: Client) -> None:
    texts: list[str] = []
    with pytest.raises(StreamError) as raised:
        for part in client.chat_stream("mock-stall", HELLO):
            texts.append(part.text)
    assert raised.value.code == "timeout" and raised.value.type == "engine_error"
    assert "".join(texts).split() == REPLY_WORDS[:3]


def test_count_tokens_matches_billing(client: Client) -> None:
    counted = client.count_tokens("mock-chat", HELLO, temperature=1.0)
    assert counted.input_tokens == PROMPT and counted.context_window == 4096


def test_embeddings_floats_and_base64(client: Client) -> None:
    floats = client.embeddings("embed-alias", ["one", "two words"])
    assert [e.index for e in floats.data] == [0, 1] and floats.usage is not None
    assert isinstance(floats.data[0].embedding, list) and len(floats.data[0].embedding) == 8
    packed = client.embeddings("mock-embed", "one", encoding_format="base64")
    assert isinstance(packed.data[0].embedding, str)
    decoded = struct.unpack("<8f", base64.b64decode(packed.data[0].embedding))
    assert decoded == pytest.approx(floats.data[0].embedding, abs=1e-6)


def test_rerank(client: Client) -> None:
    ranked = client.rerank("mock-rerank", "red apple", ["a green pear", "red apple pie", "apple"], top_n=2)
    assert [r.index for r in ranked.results] == [1, 2]
    assert ranked.results[0].relevance_score == pytest.approx(1.0)
    assert ranked.results[0].document == {"text": "red apple pie"}
    assert ranked.usage is not None and ranked.usage.completion_tokens == 0


def test_models_are_typed_with_optional_fields(client: Client) -> None:
    listed = client.models()
    by_id = {m.id: m for m in listed.data}
    chat = by_id["mock-chat"]
    assert chat.context_length == 4096 and chat.owned_by == "acme" and "fast" in chat.aliases
    assert chat.capabilities == {"tools": True, "response_format": True}
    assert chat.cost == {"input_per_m_token": 1.0, "output_per_m_token": 2.0}
    assert by_id["mock-plain"].cost is None and "mock-maint" not in by_id
    assert by_id["mock-image"].model_type == "image-gen"


def test_speech_voices_transcriptions_images(client: Client, tmp_path: Path, upstream: Upstream) -> None:
    assert client.speech("mock-tts", "Hello there", "alloy", response_format="flac") == b"FAKEAUDIO:Hello there"
    voices = client.voices("mock-tts")
    assert voices.ids == ["alloy", "echo"] and voices.data[1] == {"id": "echo", "language": "en"}
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"RIFF1234")
    transcript = client.transcribe(audio, model="mock-asr", engine_model="whisper-1", language="en")
    assert isinstance(transcript, Transcription) and transcript.text == "fake transcript"
    sent = [r for r in upstream.requests() if r["path"] == "/v1/audio/transcriptions"][-1]["body"]
    assert sent["model"] == "whisper-1" and sent["language"] == "en" and sent["file_bytes"] == 8
    verbose = client.transcribe(("b.wav", b"RIFF"), model="mock-asr", response_format="verbose_json")
    assert isinstance(verbose, Transcription) and verbose.duration == 1.5 and verbose.segments
    assert client.transcribe(b"RIFF", model="mock-asr", response_format="text") == "fake transcript"
    assert client.transcribe(b"RIFF", model="mock-asr", response_format="vtt").startswith("WEBVTT")
    images = client.generate_images("t2i", "a cat", "16x8", n=2)
    assert len(images.data) == 2 and images.data[0].png().startswith(b"\x89PNG")


def test_errors_map_to_the_tree(client: Client, server: Server) -> None:
    with pytest.raises(NotFoundError) as missing:
        client.chat("no-such-model", HELLO)
    assert missing.value.status == 404 and missing.value.type == "not_found_error"
    with pytest.raises(BadRequestError) as relayed:
        client.chat("mock-err400", HELLO)
    # A model's own rejection keeps the upstream shape: the code is the numeric status.
    assert relayed.value.code == 400 and relayed.value.type == "BadRequestError"
    with pytest.raises(BadRequestError) as invalid:
        client.chat("mock-chat", [])
    assert invalid.value.type == "invalid_request_error" and "messages" in invalid.value.message
    with Client(server.base_url, "IFDKNOPE:nope", max_attempts=1) as stranger, pytest.raises(AuthenticationError):
        stranger.models()
    with Client(server.base_url, server.create_key(budget_usd=0)) as broke, pytest.raises(BudgetExceededError) as b:
        broke.chat("mock-chat", HELLO)
    assert b.value.code == "budget_exceeded" and b.value.status == 402


def test_user_key_on_an_application_route_is_refused(client: Client, app_key: str, server: Server) -> None:
    user = client.with_api_key(server.create_user_key(app_key))
    with pytest.raises(PermissionDeniedError) as refused:
        user.chat("mock-chat", HELLO)
    assert refused.value.status == 403
    assert client.models().data  # the original client still uses its own key


def test_raw_request_escape_hatch(client: Client) -> None:
    response = client.request("GET", "/v1/models")
    assert response.status_code == 200 and response.json()["object"] == "list"
    with pytest.raises(NotFoundError):
        client.request("GET", "/v1/nothing-here")


def test_async_client_against_the_server(server: Server, app_key: str) -> None:
    async def go() -> tuple[str, str, int, int]:
        async with AsyncClient(server.v1, app_key, retry=RetryPolicy(async_sleep=_no_wait)) as client:
            blocking = await client.chat("mock-chat", HELLO)
            stream = await client.chat_stream("mock-chat", HELLO)
            streamed = "".join([c.text async for c in stream])
            counted = await client.count_tokens("mock-chat", HELLO)
            models = await client.models()
            return blocking.text, streamed, counted.input_tokens, len(models.data)

    blocking, streamed, counted, models = asyncio.run(go())
    assert blocking == streamed == " ".join(REPLY_WORDS)
    assert counted == PROMPT and models > 5


async def _no_wait(seconds: float) -> None:
    return None

"""SSE decoding: frames buffered to the blank line whatever the reads look like; `[DONE]` ends a
stream, an error frame raises, a stream cut short is an error."""

from __future__ import annotations

import asyncio
import json

import pytest

from inferd_client import (APIConnectionError, AsyncClient, ChatCompletionChunk, Client, GenerateChunk, GenerateEvent,
                           GenerateStart, ServerSentEvent, SSEDecoder, StreamError)
from tests.client.scripted import Reply, ScriptedServer

SSE = {"Content-Type": "text/event-stream"}


def chunk(text: str, usage: dict | None = None) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}], "usage": usage,
            "x_extra": "kept"}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


WIRE = chunk("Hello") + chunk(" wörld") + chunk("", {"prompt_tokens": 3, "completion_tokens": 2,
                                                     "total_tokens": 5}) + b"data: [DONE]\n\n"


def decode_in_pieces(wire: bytes, size: int) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = []
    for start in range(0, len(wire), size):
        events += decoder.feed(wire[start:start + size])
    return events + decoder.flush()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_frames_split_anywhere_decode_the_same(size: int) -> None:
    events = decode_in_pieces(WIRE, size)
    assert [e.data for e in events][-1] == "[DONE]"
    assert [json.loads(e.data)["choices"][0]["delta"]["content"] for e in events[:-1]] == ["Hello", " wörld", ""]


@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_every_line_ending(newline: bytes) -> None:
    wire = (b": keep-alive" + newline + b"event: progress" + newline + b"id: 7" + newline + b"data: {\"a\":" + newline
            + b"data: 1}" + newline + newline + b"data:[DONE]" + newline + newline)
    for size in (1, 5, len(wire)):
        events = decode_in_pieces(wire, size)
        assert events[0] == ServerSentEvent('{"a":\n1}', "progress", "7")
        assert events[0].json() == {"a": 1}
        assert events[1].data == "[DONE]"
        assert len(events) == 2


def test_last_frame_without_blank_line_is_flushed() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: {\"x\": 1}") == []
    assert [e.data for e in decoder.flush()] == ['{"x": 1}']


def test_client_stream_over_split_reads(scripted: ScriptedServer) -> None:
    pieces = [WIRE[i:i + 9] for i in range(0, len(WIRE), 9)]
    scripted.answer(Reply(200, pieces, SSE, pause=0.002))
    with Client(scripted.url, "k") as client, client.chat_stream("m", [{"role": "user", "content": "x"}]) as stream:
        chunks = list(stream)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert "".join(c.text for c in chunks) == "Hello wörld"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 5
    assert chunks[0]["x_extra"] == "kept" and chunks[0].extra == {"x_extra": "kept"}
    assert json.loads(scripted.seen[0].body)["stream"] is True


def test_error_frame_where_done_was_expected_raises(scripted: ScriptedServer) -> None:
    error = b'data: {"error": {"message": "engine timed out", "type": "engine_error", "code": "timeout"}}\n\n'
    scripted.answer(Reply(200, [chunk("Hi"), error[:20], error[20:]], SSE, pause=0.002))
    seen: list[str] = []
    with Client(scripted.url, "k") as client, pytest.raises(StreamError) as raised:
        for part in client.chat_stream("m", [{"role": "user", "content": "x"}]):
            seen.append(part.text)
    assert seen == ["Hi"]
    assert (raised.value.type, raised.value.code, raised.value.message) == ("engine_error", "timeout",
                                                                             "engine timed out")
    assert raised.value.status is None


def test_stream_cut_before_done_is_a_connection_error(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(200, [chunk("Hi"), chunk(" there")], SSE))
    with Client(scripted.url, "k") as client, pytest.raises(APIConnectionError):
        list(client.chat_stream("m", [{"role": "user", "content": "x"}]))


def test_error_before_the_stream_is_an_ordinary_error(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(404, b'{"error": {"message": "no model", "type": "not_found_error", "code": "x"}}'))
    with Client(scripted.url, "k") as client, pytest.raises(Exception) as raised:
        client.chat_stream("m", [{"role": "user", "content": "x"}])
    assert getattr(raised.value, "status") == 404 and getattr(raised.value, "message") == "no model"


GENERATE = (b'data: {"conversation_id": 12, "title": "Trip"}\n\n' b'data: {"chunk": "Par"}\n\n'
            b'data: {"type": "sources_attached", "sources": [1]}\n\n' b'data: {"chunk": "is"}\n\n' b"data: [DONE]\n\n")


def test_generate_stream_frames_are_classified(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(200, [GENERATE[i:i + 11] for i in range(0, len(GENERATE), 11)], SSE, pause=0.001))
    with Client(scripted.url, "k") as client:
        frames = list(client.generate(12, 34, model="fast", thinking=False, web_search=True))
    assert isinstance(frames[0], GenerateStart) and (frames[0].conversation_id, frames[0].title) == (12, "Trip")
    assert [f.chunk for f in frames if isinstance(f, GenerateChunk)] == ["Par", "is"]
    events = [f for f in frames if isinstance(f, GenerateEvent)]
    assert len(events) == 1 and events[0]["type"] == "sources_attached"
    seen = scripted.seen[0]
    assert seen.path == "/v1/conversations/12/generate?model=fast&thinking=false&webSearch=true"
    assert json.loads(seen.body) == {"conversation_id": 12, "message_id": 34}


def test_async_stream(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(200, [WIRE[i:i + 5] for i in range(0, len(WIRE), 5)], SSE, pause=0.001))

    async def go() -> list[str]:
        async with AsyncClient(scripted.url, "k") as client:
            stream = await client.chat_stream("m", [{"role": "user", "content": "x"}])
            async with stream:
                return [c.text async for c in stream]

    assert "".join(asyncio.run(go())) == "Hello wörld"

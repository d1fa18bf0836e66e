"""The lean HTTP/1.1 client (engines/http1.py) against small raw servers on 127.0.0.1: framing
(Content-Length, chunked, end of connection, gzip), kept-alive connections and their reuse, a
stale kept-alive connection sent on once more, timeouts, refusals, breaks, and flow control."""

from __future__ import annotations

import asyncio
import gc
import gzip
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from inferd.engines.http1 import HTTP1Pool, UpstreamBroke, UpstreamUnreachable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (Content-Length framed), or (b"", b"") at the end."""
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return b"", b""
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


CLOSE = object()  # in an answer's parts: close the connection there


class Server:
    """A raw server whose `answer(head, body)` returns the bytes to write: one part or a list of
    them, a float part being a pause and CLOSE a close (None alone: close without answering)."""

    def __init__(self, answer: Callable[[bytes, bytes], Any]) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []

    async def start(self) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                while True:
                    try:
                        head, body = await _read_request(reader)
                    except (asyncio.IncompleteReadError, ConnectionError):
                        return
                    if not head:
                        return
                    self.requests.append(head + body)
                    reply = self.answer(head, body)
                    if asyncio.iscoroutine(reply):
                        reply = await reply
                    if reply is None:
                        return
                    for part in reply if isinstance(reply, list) else [reply]:
                        if part is CLOSE:
                            return
                        if isinstance(part, float):
                            await asyncio.sleep(part)
                            continue
                        writer.write(part)
                        await writer.drain()
            finally:
                writer.close()

        self._server = await asyncio.start_server(serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._server.close()
        await asyncio.sleep(0.05)  # the handlers see their connections close and end


def _ok(body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def _post(pool: HTTP1Pool, body: bytes = b"{}") -> bytes:
    return (f"POST /v1/x HTTP/1.1\r\nHost: {pool.host_header}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_kept_alive_connections_are_reused_and_framing_is_followed() -> None:
    async def test() -> None:
        chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n" \
                  b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        answers = iter([_ok(b"first"), chunked, _ok(b"third", "X-Twice: a\r\nX-Twice: b\r\n")])
        server = Server(lambda head, body: next(answers))
        pool = HTTP1Pool("127.0.0.1", await server.start(), 5, 5)
        replies = []
        for _ in range(3):
            reply = await pool.request(_post(pool))
            replies.append((reply.status, reply.headers, await reply.read()))
        assert [r[2] for r in replies] == [b"first", b"hello world", b"third"]
        assert replies[1][1]["content-type"] == "text/plain" and replies[2][1]["x-twice"] == "a, b"
        assert server.connections == 1  # one kept-alive connection carried all three
        await pool.close()
        await server.stop()
    run(test)


def test_concurrent_requests_each_get_their_own_answer() -> None:
    async def test() -> None:
        async def echo(head: bytes, body: bytes) -> bytes:
            await asyncio.sleep(0.01)
            return _ok(body)

        server = Server(echo)
        pool = HTTP1Pool("127.0.0.1", await server.start(), 5, 5)

        async def one(n: int) -> bytes:
            reply = await pool.request(_post(pool, str(n).encode()))
            return await reply.read()

        for _ in range(2):
            assert await asyncio.gather(*[one(n) for n in range(20)]) == [str(n).encode() for n in range(20)]
        assert server.connections == 20  # the second round reused the first round's connections
        await pool.close()
        await server.stop()
    run(test)


def test_a_gzipped_body_is_undone() -> None:
    async def test() -> None:
        packed = gzip.compress(b"x" * 100_000)
        server = Server(lambda head, body: _ok(packed, "Content-Encoding: gzip\r\n"))
        pool = HTTP1Pool("127.0.0.1", await server.start(), 5, 5)
        reply = await pool.request(_post(pool))
        assert await reply.read() == b"x" * 100_000
        await pool.close()
        await server.stop()
    run(test)


def test_end_of_connection_framing_completes_the_read() -> None:
    async def test() -> None:
        server = Server(lambda head, body: [b"HTTP/1.0 200 OK\r\n\r\nuntil the end", CLOSE])
        pool = HTTP1Pool("127.0.0.1", await server.start(), 5, 5)
        reply = await pool.request(_post(pool))
        assert await reply.read() == b"until the end"
        assert pool._idle == []  # not kept: the answer ended with the connection
        await server.stop()
    run(test)


def test_an_idle_connection_the_server_closed_is_replaced_without_an_error() -> None:
    async def test() -> None:
        served = {"n": 0}

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # Answers one request, then closes without saying so (an idle timeout on the server).
            await _read_request(reader)
            served["n"] += 1
            writer.write(_ok(b"answer %d" % served["n"]))
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        pool = HTTP1Pool("127.0.0.1", server.sockets[0].getsockname()[1], 5, 5)
        reply = await pool.request(_post(pool))
        assert await reply.read() == b"answer 1"
        await asyncio.sleep(0.2)  # the close was read: the connection left the pool
        assert pool._idle == []
        reply = await pool.request(_post(pool))
        assert await reply.read() == b"answer 2"
        # Now a close the client has not read yet (its socket is not being read): the request
        # goes out on the dead connection, finds it closed before any answer, and is sent once
        # more on a new connection.
        [conn] = pool._idle
        conn.pause()
        await asyncio.sleep(0.2)
        assert pool._idle == [conn] and not conn.closed
        reply = await pool.request(_post(pool))
        assert await reply.read() == b"answer 3" and served["n"] == 3
        await pool.close()
        server.close()
        await asyncio.sleep(0.1)
    run(test)


def test_timeouts_refusals_and_garbage() -> None:
    async def test() -> None:
        answers = iter([[0.6, _ok(b"late")], [b"NOT HTTP AT ALL\r\n\r\n"]])
        server = Server(lambda head, body: next(answers))
        port = await server.start()
        pool = HTTP1Pool("127.0.0.1", port, 5, 0.3)
        with pytest.raises(asyncio.TimeoutError):  # no answer within the read timeout
            await pool.request(_post(pool))
        assert pool._idle == []  # the late answer could still come: that connection is gone
        with pytest.raises(UpstreamBroke):
            await pool.request(_post(pool))
        await asyncio.sleep(0.5)  # the server's late writer finds the connection gone and ends
        await server.stop()
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            closed_port = probe.getsockname()[1]
        with pytest.raises(UpstreamUnreachable):
            await HTTP1Pool("127.0.0.1", closed_port, 5, 5).request(b"GET / HTTP/1.1\r\n\r\n")
    run(test)


def test_a_body_cut_short_raises_and_a_stream_arrives_in_pieces() -> None:
    async def test() -> None:
        answers = iter([
            [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part", CLOSE],
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"3\r\none\r\n", 0.05, b"3\r\ntwo\r\n",
             0.05, b"0\r\n\r\n"],
        ])
        server = Server(lambda head, body: next(answers))
        pool = HTTP1Pool("127.0.0.1", await server.start(), 5, 5)
        reply = await pool.request(_post(pool))
        with pytest.raises(UpstreamBroke):
            await reply.read()
        reply = await pool.request(_post(pool))
        pieces = [piece async for piece in reply.pieces()]
        assert pieces == [b"one", b"two"]
        assert len(pool._idle) == 1  # read to its end: kept
        await pool.close()
        await server.stop()
    run(test)


def test_a_slow_reader_pauses_the_socket_and_loses_nothing() -> None:
    async def test() -> None:
        block = b"y" * 65536

        chunks = [b"%x\r\n" % len(block) + block + b"\r\n"] * 64  # 4 MiB, past the 1 MiB at which reading pauses
        server = Server(lambda head, body: [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", *chunks,
                                            b"0\r\n\r\n", CLOSE])
        pool = HTTP1Pool("127.0.0.1", await server.start(), 5, 5)
        reply = await pool.request(_post(pool))
        total = 0
        paused_once = False
        async for piece in reply.pieces():
            total += len(piece)
            await asyncio.sleep(0.01)  # slower than the server
            paused_once = paused_once or reply._conn._paused
        assert total == 64 * 65536 and paused_once
        await pool.close()
        await server.stop()
    run(test)


def test_urls_the_lean_client_does_not_take_go_through_aiohttp_alike() -> None:
    """Credentials in the URL (and https) go through aiohttp behind the same interface: the same
    reply (status, lower-case headers, body whole or in pieces) and the same errors."""
    from inferd.engines.upstream_http import UpstreamHTTP

    async def test() -> None:
        chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Kind: Stream\r\n\r\n3\r\none\r\n0\r\n\r\n"
        answers = iter([_ok(b"whole", "Content-Type: text/plain\r\n"), chunked])
        server = Server(lambda head, body: next(answers))
        port = await server.start()
        for base, lean in ((f"http://127.0.0.1:{port}/v1", True), (f"http://ann:pw@127.0.0.1:{port}/v1", False)):
            client = UpstreamHTTP(base, {"Content-Type": "application/json"}, 5, 5)
            assert (client._lean is not None) == lean
            answers = iter([_ok(b"whole", "Content-Type: text/plain\r\n"), chunked])
            reply = await client.request("POST", base + "/chat/completions", b'{"a": 1}', "req-7")
            assert (reply.status, reply.headers["content-type"], await reply.read()) == (200, "text/plain", b"whole")
            reply = await client.request("GET", base + "/models")
            assert reply.headers["x-kind"] == "Stream" and [p async for p in reply.pieces()] == [b"one"]
            reply.release()
            await client.close()
        sent = server.requests
        assert sent[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and b"x-request-id: req-7" in sent[0]
        assert sent[0].endswith(b'{"a": 1}') and sent[1].startswith(b"GET /v1/models HTTP/1.1\r\n")
        assert b"Authorization: Basic YW5uOnB3" in sent[2] and b"req-7" in sent[2]
        await server.stop()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed_port = probe.getsockname()[1]
        for base in (f"http://127.0.0.1:{closed_port}", f"http://ann:pw@127.0.0.1:{closed_port}"):
            client = UpstreamHTTP(base, {}, 5, 5)
            with pytest.raises(UpstreamUnreachable):
                await client.request("GET", base + "/health")
            await client.close()
    run(test)


def test_a_caller_that_gives_up_closes_the_connection() -> None:
    """Cancelled while waiting (a batch expiring, a client gone), the exchange's connection is
    closed, so the upstream sees the abort and stops; it is never reused."""
    async def test() -> None:
        seen_close = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _read_request(reader)
            if await reader.read() == b"":  # never answers; waits for the client to go
                seen_close.set()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        pool = HTTP1Pool("127.0.0.1", server.sockets[0].getsockname()[1], 5, 600)
        waiting = asyncio.ensure_future(pool.request(_post(pool)))
        await asyncio.sleep(0.1)
        waiting.cancel()
        await asyncio.wait_for(seen_close.wait(), 2)
        assert pool._idle == [] and not pool._open
        server.close()
        await asyncio.sleep(0.05)
    run(test)


def test_an_engine_stream_closes_its_reader_itself_and_gives_the_connection_back() -> None:
    """The `openai` engine's stream, read to its end mark and closed as the relay does, closes
    the reply's piece reader itself: nothing is left for the loop's async-generator finalizer
    (a self-pipe write, a loop turn and a task for each stream), and the kept-alive connection
    serves the next stream."""
    from inferd.config_models import ModelConfig
    from inferd.engines.openai_http import OpenAIHTTPEngine

    events = b"".join(b'data: {"choices":[{"delta":{"content":"w%d"}}]}\n\n' % i for i in range(5))
    events += b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}\n\ndata: [DONE]\n\n'
    parts = [event + b"\n\n" for event in events.split(b"\n\n")[:-1]]  # one chunk an event
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"
    server = Server(lambda head, body: [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                        b"Transfer-Encoding: chunked\r\n\r\n", chunked])

    async def main() -> tuple[list[list[bytes]], list[str]]:
        port = await server.start()
        first, finalizer = sys.get_asyncgen_hooks()
        left_to_the_loop: list[str] = []

        def counting(agen: Any) -> None:
            left_to_the_loop.append(agen.ag_code.co_qualname)
            finalizer(agen)  # type: ignore[misc]

        sys.set_asyncgen_hooks(first, counting)
        engine = OpenAIHTTPEngine(ModelConfig(id="m", base_url=f"http://127.0.0.1:{port}/v1"))
        read: list[list[bytes]] = []
        try:
            for _ in range(2):
                stream = engine.chat_stream({"model": "m", "messages": [], "stream": True})
                batches: list[bytes] = []
                async for batch in stream:
                    batches += batch
                    if batch[-1] == b"[DONE]":
                        break
                await stream.aclose()
                read.append(batches)
                gc.collect()
                await asyncio.sleep(0.01)
        finally:
            sys.set_asyncgen_hooks(first, finalizer)
            await engine.close()
            await server.stop()
        return read, left_to_the_loop

    read, left = asyncio.run(main())
    assert [len(batches) for batches in read] == [7, 7] and read[0][-1] == b"[DONE]"
    assert left == []
    assert server.connections == 1


def test_a_slow_answer_on_a_kept_alive_connection_times_out_once_and_is_not_sent_again() -> None:
    """Only a connection found closed before any answer is retried: a read timeout (an OSError
    since Python 3.11) must reach the caller after one timeout, the request sent once."""
    # Event order rather than a bound on the wait: the late answer is held back until the caller has
    # its error, so the error can only be the pool's own 0.3 s timeout, and at that moment the request
    # must have been sent once (a retry would have sent it again before giving up).
    async def test() -> None:
        release = asyncio.Event()

        async def answer(head: bytes, body: bytes) -> list[Any]:
            if len(server.requests) == 1:
                return [_ok(b"quick")]
            await release.wait()
            return [_ok(b"late")]

        server = Server(answer)
        pool = HTTP1Pool("127.0.0.1", await server.start(), 5, 0.3)
        reply = await pool.request(_post(pool))
        assert await reply.read() == b"quick" and len(pool._idle) == 1
        started = time.monotonic()
        slow = asyncio.ensure_future(pool.request(_post(pool)))  # on the kept-alive connection
        await asyncio.wait([slow], timeout=60)  # a guard against a hang only
        waited = time.monotonic() - started
        assert slow.done() and isinstance(slow.exception(), asyncio.TimeoutError)
        assert len(server.requests) == 2 and waited >= 0.29  # sent once; not before the timeout
        release.set()  # the late writer finds its connection gone
        await asyncio.sleep(0.1)
        assert len(server.requests) == 2  # and nothing is sent after the error either
        await pool.close()
        await server.stop()
    run(test)

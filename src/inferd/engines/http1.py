"""A lean HTTP/1.1 client for plain-http upstreams: the hop every engine call makes.

aiohttp's client costs about 140 us of CPU a request at concurrency 1 and 58 us at 64 on the
machines we measure (a session, a request and a response object, a payload registry, a timer
context, a task for the body writer); this one costs 38 and 12 us. It does what an engine call
needs and no more:

- one keep-alive pool per upstream (host and port), most recently used connection first;
- a request is written in one write (head and body together);
- the answer is parsed by httptools (the C parser uvicorn uses): status, headers, a body framed
  by Content-Length, chunked encoding or the end of the connection, gzip or deflate undone;
- the body is read whole (`read`) or piece by piece as it arrives (`pieces`, for SSE);
- `connect_timeout` bounds the connect, `read_timeout` every wait for the answer's next bytes;
- a request on a kept-alive connection that the upstream closed before answering a byte is sent
  once more on a new connection (the upstream closed an idle connection as we wrote on it).

https, credentials in the URL and multipart uploads go through aiohttp (engines/upstream_http.py).
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator

import httptools

_IDLE_SECONDS = 60.0  # a kept-alive connection unused this long is closed rather than reused
_HIGH_WATER = 1 << 20  # buffered body bytes above which the socket is not read


class UpstreamUnreachable(Exception):
    """No connection could be made (refused, unresolvable); a connect that times out raises
    asyncio.TimeoutError, as an answer that does not come does."""


class UpstreamBroke(Exception):
    """The connection broke, or the answer was not HTTP, before the exchange ended."""


class Reply:
    """One answer: its status and headers once they arrived, then its body."""

    def __init__(self, conn: "_Connection", timeout: float) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}  # lower-case names
        self._conn = conn
        self._timeout = timeout
        self._pieces: list[bytes] = []
        self._buffered = 0
        self._head_done = False
        self._ended = False  # the body's last byte arrived
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._inflate: zlib._Decompress | None = None
        self._streaming = False  # read piece by piece: the socket may pause while pieces wait
        self._released = False
        self.got_bytes = False  # any byte of the answer arrived

    # What the connection feeds in.

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _head(self, status: int) -> None:
        self.status = status
        self._head_done = True
        coding = self.headers.get("content-encoding", "identity").strip().lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            self._inflate = zlib.decompressobj(wbits=47)  # gzip or zlib framing, told by the header
        elif coding not in ("identity", ""):
            self._fail(UpstreamBroke(f"unsupported Content-Encoding {coding!r}"))
            return
        self._wake()

    def _body(self, data: bytes) -> None:
        if self._inflate is not None:
            try:
                data = self._inflate.decompress(data)
            except zlib.error as exc:
                self._fail(UpstreamBroke(f"undecodable body: {exc}"))
                return
        if data:
            self._pieces.append(data)
            self._buffered += len(data)
            if self._streaming and self._buffered > _HIGH_WATER:
                self._conn.pause()
            self._wake()

    def _end(self) -> None:
        if self._inflate is not None:
            tail = self._inflate.flush()
            if tail:
                self._pieces.append(tail)
        self._ended = True
        if self._released:
            self._conn.done(self)
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if self._error is None and not self._ended:
            self._error = error
            self._conn.drop_for(self)
        self._wake()

    # What the engine calls.

    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(self._timeout, self._expire, waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            self._conn.drop_for(self)  # the caller gave up: the upstream sees the connection close
            raise
        finally:
            timer.cancel()
            self._waiter = None

    def _expire(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            waiter.set_exception(asyncio.TimeoutError())
            self._conn.drop_for(self)  # the answer may still come: the connection cannot carry another

    async def head(self) -> None:
        """Wait for the status line and headers."""
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read(self) -> bytes:
        """The whole body (the connection then goes back to the pool)."""
        while not self._ended:
            if self._error is not None:
                raise self._error
            await self._wait()
        body = self._pieces[0] if len(self._pieces) == 1 else b"".join(self._pieces)
        self._pieces = []
        self._conn.done(self)
        return body

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives: everything buffered at each step, until its end."""
        self._streaming = True
        while True:
            if self._pieces:
                pieces, self._pieces = self._pieces, []
                if self._buffered > _HIGH_WATER:
                    self._conn.resume()
                self._buffered = 0
                yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
            elif self._ended:
                self._conn.done(self)
                return
            elif self._error is not None:
                raise self._error
            else:
                await self._wait()

    def release(self) -> None:
        """Done with the answer: the connection is reused once its body has ended (a stream read
        up to its `[DONE]` may still have its terminating chunk on the way: it gets a second)."""
        if self._error is not None:
            self.close()
        elif self._ended:
            self._conn.done(self)
        elif not self._released:
            self._released = True
            self._conn.resume()
            asyncio.get_running_loop().call_later(1.0, self._give_up)

    def _give_up(self) -> None:
        if not self._ended:
            self.close()

    def close(self) -> None:
        """Drop the connection, unless the answer ended and it went back to the pool (the
        upstream sees the client go)."""
        self._conn.drop_for(self)


class _Connection(asyncio.Protocol):
    """One kept-alive connection and the answer it is reading."""

    def __init__(self, pool: "HTTP1Pool") -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._reply: Reply | None = None
        self.closed = False
        self._keep_alive = False
        self.idle_since = 0.0
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def send(self, data: bytes, timeout: float) -> Reply:
        """Write one request; its answer arrives in the Reply."""
        reply = self._reply = Reply(self, timeout)
        assert self._transport is not None
        self.resume()
        self._transport.write(data)
        return reply

    def data_received(self, data: bytes) -> None:
        reply = self._reply
        if reply is None:  # bytes nobody asked for: the connection cannot be trusted
            self.drop()
            return
        reply.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            reply._fail(UpstreamBroke(f"not an HTTP answer: {exc}"))

    # httptools callbacks.

    def on_header(self, name: bytes, value: bytes) -> None:
        reply = self._reply
        if reply is not None:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            reply.headers[key] = f"{reply.headers[key]}, {text}" if key in reply.headers else text

    def on_headers_complete(self) -> None:
        reply = self._reply
        if reply is not None:
            status = self._parser.get_status_code()
            if status < 200:  # an interim answer (103 Early Hints): the real one follows
                reply.headers = {}
            else:
                reply._head(status)

    def on_body(self, body: bytes) -> None:
        if self._reply is not None:
            self._reply._body(body)

    def on_message_complete(self) -> None:
        reply = self._reply
        if reply is not None and reply._head_done:
            # Asked here: the parser forgets the answer's framing once its callback returns.
            self._keep_alive = self._parser.should_keep_alive()
            reply._end()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        reply = self._reply
        if reply is not None and not reply._ended:
            if reply._head_done and "content-length" not in reply.headers and \
                    "chunked" not in reply.headers.get("transfer-encoding", ""):
                reply._end()  # a body framed by the end of the connection
            else:
                reply._fail(UpstreamBroke("the upstream closed the connection"
                                          + (f" ({type(exc).__name__}: {exc})" if exc else "")))
        self._pool.forget(self)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._transport is not None and not self.closed:
            self._paused = False
            self._transport.resume_reading()

    def done(self, reply: Reply) -> None:
        """The answer ended: back to the pool when the upstream keeps the connection open."""
        if self._reply is reply:
            self._reply = None
            if not self.closed and self._keep_alive:
                self.resume()
                self._pool.keep(self)
            else:
                self.drop()

    def drop_for(self, reply: Reply) -> None:
        """Close the connection if it still carries `reply`."""
        if self._reply is reply:
            self.drop()

    def drop(self) -> None:
        """Close the connection; it is not reused."""
        if not self.closed:
            self.closed = True
            if self._transport is not None:
                self._transport.close()
        self._pool.forget(self)


class HTTP1Pool:
    """Kept-alive connections to one upstream (host, port)."""

    def __init__(self, host: str, port: int, connect_timeout: float, read_timeout: float) -> None:
        self._host = host
        self._port = port
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self.host_header = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"

    def keep(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        self._open.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self._host, self._port),
                self._connect_timeout)
        except asyncio.TimeoutError:  # an OSError since Python 3.11: not a refusal
            raise  # the engine's timeout, as for an answer that does not come
        except OSError as exc:
            raise UpstreamUnreachable(f"cannot connect to {self.host_header}: {exc}") from None
        self._open.add(conn)
        return conn

    def _reusable(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if conn.closed:
                continue
            if now - conn.idle_since > _IDLE_SECONDS:
                conn.drop()
                continue
            return conn
        return None

    async def request(self, data: bytes) -> Reply:
        """Send a whole request (`data`: head and body) and wait for the answer's head."""
        conn = self._reusable()
        if conn is not None:
            try:
                reply = conn.send(data, self._read_timeout)
                await reply.head()
                return reply
            except asyncio.TimeoutError:  # an OSError since Python 3.11; the upstream is slow, not gone
                raise
            except (UpstreamBroke, RuntimeError, OSError):
                if conn._reply is not None and conn._reply.got_bytes:
                    raise
                # The upstream closed the idle connection as we wrote: once more, on a new one.
                conn.drop()
        reply = (await self._connect()).send(data, self._read_timeout)
        await reply.head()
        return reply

    async def close(self) -> None:
        """Close every connection."""
        for conn in list(self._open) + self._idle:
            conn.drop()
        self._idle.clear()
        self._open.clear()

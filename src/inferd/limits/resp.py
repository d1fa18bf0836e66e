"""A lean Redis client for the limits on the hot path: one connection per process, commands
written in order and their replies matched in order (so any number can be in flight: a pipeline
is just several written at once), RESP2 parsed straight from the socket's bytes.

redis-py's asyncio client costs about 80 us of CPU a command here (a stream writer, a timeout
context and observability hooks per command, a Protocol isinstance check per script call); the
admission and the spend increment are two commands on every metered call. This does the same
work in a fraction of that. It knows only what the limits need: commands as argument lists,
EVALSHA scripts that are loaded again when Redis has lost them, and a reconnect when the
connection dropped while idle. A command whose connection drops after it was written fails (it
may have run: an admission is never sent twice).

It speaks plain `redis://` over TCP. Other URLs (`rediss://` with TLS, `unix://` sockets) go
through redis-py behind the same three methods (`connect`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from typing import Any, Sequence
from urllib.parse import unquote, urlsplit

Command = Sequence[Any]


class RedisReplyError(Exception):
    """An error reply (`-ERR ...`): the command ran and Redis refused it."""


class NoScriptError(RedisReplyError):
    """EVALSHA of a script Redis does not hold (it restarted, or SCRIPT FLUSH)."""


class _Incomplete(Exception):
    """The buffer ends inside a reply: wait for more bytes."""


class Encoded(bytes):
    """An argument already framed as RESP's bulk string, written as it is: for the names and
    script texts sent on every call, framed once instead of per call (`raw`: the argument)."""

    raw: bytes

    @classmethod
    def of(cls, value: str | bytes) -> "Encoded":
        """`value` framed once."""
        data = value.encode() if isinstance(value, str) else value
        framed = cls(b"$%d\r\n%s\r\n" % (len(data), data))
        framed.raw = data
        return framed


def _encode(command: Command) -> bytes:
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        kind = type(arg)
        if kind is Encoded:
            parts.append(arg)
            continue
        if kind is str:
            data = arg.encode()
        elif isinstance(arg, bytes):
            data = arg
        else:
            data = str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _plain(arg: Any) -> Any:
    """An argument as redis-py takes it."""
    return arg.raw if type(arg) is Encoded else arg


def _parse(buffer: bytearray, pos: int) -> tuple[Any, int]:
    """One reply from `buffer` at `pos`: (value, position after it). Bulk strings are bytes, nil is
    None, an error reply is a RedisReplyError (returned, not raised: it belongs to its command)."""
    end = buffer.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind, line = buffer[pos], bytes(buffer[pos + 1:end])
    pos = end + 2
    if kind == 58:  # ':'
        return int(line), pos
    if kind == 36:  # '$'
        size = int(line)
        if size < 0:
            return None, pos
        if len(buffer) < pos + size + 2:
            raise _Incomplete
        return bytes(buffer[pos:pos + size]), pos + size + 2
    if kind == 42:  # '*'
        count = int(line)
        if count < 0:
            return None, pos
        items = []
        for _ in range(count):
            item, pos = _parse(buffer, pos)
            items.append(item)
        return items, pos
    if kind == 43:  # '+'
        return line.decode(), pos
    if kind == 45:  # '-'
        message = line.decode("utf-8", "replace")
        return (NoScriptError if message.startswith("NOSCRIPT") else RedisReplyError)(message), pos
    raise ConnectionError(f"Redis sent an unreadable reply (type byte {kind!r})")


_SKIP_NEXT_REPLY = _encode(("CLIENT", "REPLY", "SKIP"))  # itself unanswered, and the next command too


class _Replies(asyncio.Protocol):
    """Matches the replies on one connection to the commands written on it, in order."""

    def __init__(self) -> None:
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos = 0
        try:
            while pos < len(buffer):
                reply, pos = _parse(buffer, pos)
                waiter = self.waiting.popleft()
                if not waiter.done():
                    waiter.set_result(reply)
        except _Incomplete:
            pass
        except (ConnectionError, IndexError, ValueError) as exc:  # out of step with the server: drop it
            del buffer[:]
            self._fail(ConnectionError(f"Redis connection out of step: {exc}"))
            if self.transport is not None:
                self.transport.close()
            return
        del buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._fail(ConnectionError(f"Redis connection lost: {exc or 'closed by the server'}"))

    def _fail(self, error: Exception) -> None:
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_exception(error)


def _raised(reply: Any) -> Any:
    """A reply, or the error it is, raised."""
    if isinstance(reply, Exception):
        raise reply
    return reply


class _Commands:
    """`execute` and `send_unanswered` over a client's `pipeline`."""

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        raise NotImplementedError

    async def send_unanswered(self, command: Command, soon: bool = False) -> None:
        """Run a command whose reply nobody needs. Here: wait for it, and raise an error reply."""
        _raised((await self.pipeline([command]))[0])

    async def execute(self, *command: Any) -> Any:
        """One command's reply; an error reply is raised."""
        (reply,) = await self.pipeline([command])
        return _raised(reply)


class RespClient(_Commands):
    """Commands over one connection to the Redis of a `redis://[user:password@]host[:port][/db]` URL."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError(f"RespClient speaks redis:// only, not {parts.scheme}:// (use connect())")
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 6379
        self._db = int(parts.path.lstrip("/") or 0)
        self._username = unquote(parts.username) if parts.username else None
        self._password = unquote(parts.password) if parts.password else None
        self._replies: _Replies | None = None
        self._connecting: asyncio.Lock | None = None
        self._reply_skip = False  # the server takes CLIENT REPLY SKIP (probed on connect)
        self._later = bytearray()  # unanswered commands not written yet (`send_unanswered(soon=True)`)
        self._flush_due = False

    async def _connected(self) -> _Replies:
        replies = self._replies
        if replies is not None and replies.transport is not None and not replies.transport.is_closing():
            return replies
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            replies = self._replies
            if replies is not None and replies.transport is not None and not replies.transport.is_closing():
                return replies
            _, replies = await asyncio.get_running_loop().create_connection(_Replies, self._host, self._port)
            setup: list[Command] = []
            if self._password is not None:
                setup.append(("AUTH", self._username, self._password) if self._username else ("AUTH", self._password))
            if self._db:
                setup.append(("SELECT", self._db))
            setup.append(("CLIENT", "REPLY", "ON"))  # the probe: a proxy or old server answers an error
            *answers, probe = await self._send(replies, setup, first=True)
            for reply in answers:
                if isinstance(reply, Exception):
                    replies.transport.close()  # type: ignore[union-attr]
                    raise ConnectionError(f"Redis refused the connection's setup: {reply}")
            self._reply_skip = not isinstance(probe, Exception)
            self._replies = replies
            return replies

    async def _send(self, replies: _Replies, commands: Sequence[Command], first: bool = False) -> list[Any]:
        """Write `commands` (after those held back, unless they are a new connection's `first`)
        and wait for their replies."""
        if not commands:
            return []
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in commands]
        replies.waiting.extend(futures)
        assert replies.transport is not None
        held = b"" if first else self._take_later()
        replies.transport.write(held + b"".join(map(_encode, commands)))
        return [await future for future in futures]

    def _take_later(self) -> bytes:
        """The unanswered commands held back, to go first in the next write (order is kept)."""
        if not self._later:
            return b""
        held = bytes(self._later)
        self._later.clear()
        return held

    def _flush_later(self) -> None:
        self._flush_due = False
        replies = self._replies
        if self._later and replies is not None and replies.transport is not None:
            replies.transport.write(self._take_later())

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Every command's reply, in order, error replies as RedisReplyError values."""
        return await self._send(await self._connected(), commands)

    async def send_unanswered(self, command: Command, soon: bool = False) -> None:
        """Write a command that Redis runs without replying (CLIENT REPLY SKIP), and return at once.

        No reply means no wake-up of this process to read one: on a call's hot path (the spend
        added after each usage commit) that is most of a round trip's CPU (30 -> 5.5 us measured
        alone), and the whole of its latency. Commands written later on this connection run after
        it, so this process's next read sees its effect. An error it meets in Redis goes unseen:
        use it only for commands whose loss costs no more than a dropped connection would. A
        server that does not take CLIENT REPLY gets the command with its reply awaited, as
        `execute` does.

        With `soon`, the command is held until the next write on the connection or the end of
        this turn of the event loop, whichever comes first: the commands of calls that end together
        (and the one a call sends next) share one system call. For commands nobody reads at once
        (a finished call's tokens), never for one that must be in Redis before the caller goes on."""
        replies = await self._connected()
        if not self._reply_skip:
            _raised((await self._send(replies, [command]))[0])
            return
        assert replies.transport is not None
        if soon:
            self._later += _SKIP_NEXT_REPLY + _encode(command)
            if not self._flush_due:
                self._flush_due = True
                asyncio.get_running_loop().call_soon(self._flush_later)
            return
        replies.transport.write(self._take_later() + _SKIP_NEXT_REPLY + _encode(command))

    async def close(self) -> None:
        """Close the connection."""
        if self._replies is not None and self._replies.transport is not None:
            self._replies.transport.close()
        self._replies = None


class RedisPyClient(_Commands):
    """`RespClient`'s methods over redis-py, for the URLs it does not speak (TLS, Unix sockets)."""

    def __init__(self, url: str) -> None:
        from redis.asyncio import Redis

        self._redis = Redis.from_url(url)

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Every command's reply, in order, error replies as RedisReplyError values."""
        from redis.exceptions import NoScriptError as RedisPyNoScript
        from redis.exceptions import ResponseError

        pipe = self._redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*map(_plain, command))
        replies = await pipe.execute(raise_on_error=False)
        return [NoScriptError(str(r)) if isinstance(r, RedisPyNoScript) else
                RedisReplyError(str(r)) if isinstance(r, ResponseError) else r for r in replies]

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()


Client = RespClient | RedisPyClient


def connect(url: str) -> Client:
    """The client for a Redis URL: the lean one for `redis://`, redis-py for the others."""
    return RespClient(url) if urlsplit(url).scheme == "redis" else RedisPyClient(url)


class Script:
    """A Lua script run by EVALSHA, loaded again (once) when Redis no longer holds it."""

    def __init__(self, client: Client, source: str) -> None:
        self._client = client
        self._source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self._sha = Encoded.of(self.sha)

    async def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        (reply,) = await self.many([(keys, args)])
        return _raised(reply)

    async def many(self, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """Every call's reply (error replies as values), sent together."""
        for attempt in range(2):
            replies = await self._client.pipeline([("EVALSHA", self._sha, len(keys), *keys, *args) for keys, args in calls])
            if attempt == 0 and any(isinstance(reply, NoScriptError) for reply in replies):
                await self._client.execute("SCRIPT", "LOAD", self._source)
                continue
            return replies
        raise RuntimeError("unreachable")

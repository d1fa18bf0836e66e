"""The limits' Redis clients (limits/resp.py) against the real Redis: replies of every type, many
commands in flight on one connection, replies split across reads, error replies, scripts Redis has
forgotten, and a connection the server dropped. The lean client speaks redis://; the redis-py
one, for TLS and Unix-socket URLs, must answer the limits the same way."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from typing import Any, Iterator

import pytest

from inferd.limits.resp import Client, RedisPyClient, RedisReplyError, RespClient, Script, connect
from tests.harness import Backend


@pytest.fixture
def url(backend: Backend) -> str:
    if not backend.redis_url:
        pytest.skip("in-process limits: no Redis in this run")
    return backend.redis_url


@pytest.fixture(params=["lean", "redis-py"])
def make(request: pytest.FixtureRequest) -> Any:
    return RespClient if request.param == "lean" else RedisPyClient


def run(url: str, body: Any, make: Any = RespClient) -> Any:
    async def main() -> Any:
        client = make(url)
        try:
            return await body(client, "resp-test:" + os.urandom(6).hex() + ":")
        finally:
            await client.close()

    return asyncio.run(main())


def test_replies_of_every_type(url: str) -> None:
    async def body(client: RespClient, ns: str) -> list[Any]:
        return [
            await client.execute("SET", ns + "a", "héllo", "EX", 60),
            await client.execute("GET", ns + "a"),
            await client.execute("GET", ns + "missing"),
            await client.execute("INCRBY", ns + "n", 41),
            await client.execute("EVAL", "return {1, {2, 'x'}, false, redis.call('GET', KEYS[1])}", 1, ns + "a"),
        ]

    assert run(url, body) == ["OK", "héllo".encode(), None, 41, [1, [2, b"x"], None, "héllo".encode()]]


def test_many_commands_in_flight_get_their_own_replies(url: str) -> None:
    async def body(client: RespClient, ns: str) -> tuple[list[Any], list[Any]]:
        big = os.urandom(1 << 20)  # arrives in many reads
        singles = await asyncio.gather(*(client.execute("ECHO", f"n{i}") for i in range(300)),
                                       client.execute("SET", ns + "big", big, "EX", 60))
        piped = await client.pipeline([("GET", ns + "big"), ("LPUSH", ns + "list", "x"), ("GET", ns + "big")])
        return singles, [piped[0] == big, piped[1], piped[2] == big]

    singles, piped = run(url, body)
    assert singles == [f"n{i}".encode() for i in range(300)] + ["OK"]
    assert piped == [True, 1, True]


def test_an_error_reply_is_raised_alone_and_returned_in_a_pipeline(url: str, make: Any) -> None:
    async def body(client: Client, ns: str) -> list[Any]:
        await client.execute("SET", ns + "s", "text", "EX", 60)
        with pytest.raises(RedisReplyError, match="WRONGTYPE"):
            await client.execute("LPUSH", ns + "s", "x")
        return await client.pipeline([("INCR", ns + "s"), ("GET", ns + "s")])

    error, value = run(url, body, make)
    assert isinstance(error, RedisReplyError) and value == b"text"


def test_a_forgotten_script_is_loaded_again(url: str, make: Any) -> None:
    async def body(client: Client, ns: str) -> list[Any]:
        script = Script(client, "return redis.call('INCRBY', KEYS[1], ARGV[1])")
        first = await script([ns + "c"], [2])
        await client.execute("SCRIPT", "FLUSH")
        return [first, await script([ns + "c"], [3]), await script.many([([ns + "c"], [1]), ([ns + "c"], [1])])]

    assert run(url, body, make) == [2, 5, [6, 7]]


def test_a_connection_the_server_dropped_is_opened_again(url: str) -> None:
    async def body(client: RespClient, ns: str) -> list[Any]:
        mine = await client.execute("CLIENT", "ID")
        killer = RespClient(url)
        try:
            assert await killer.execute("CLIENT", "KILL", "ID", mine) == 1
        finally:
            await killer.close()
        await asyncio.sleep(0.05)  # the close reaches this side
        return [mine, await client.execute("CLIENT", "ID"), await client.execute("PING")]

    before, after, pong = run(url, body)
    assert after != before and pong == "PONG"


def test_each_url_gets_its_client(url: str) -> None:
    assert isinstance(connect(url), RespClient)
    assert isinstance(connect("rediss://127.0.0.1:6380/0"), RedisPyClient)
    assert isinstance(connect("unix:///run/redis/redis.sock?db=1"), RedisPyClient)


def _reply_skips(url: str) -> int:
    """How many CLIENT REPLY commands Redis has run, all clients together (before Redis 7: all
    CLIENT commands, which only adds to the count)."""
    async def read() -> bytes:
        client = RespClient(url)
        try:
            return await client.execute("INFO", "commandstats")
        finally:
            await client.close()

    calls = {}
    for line in asyncio.run(read()).decode().splitlines():
        name, _, stats = line.partition(":")
        if name in ("cmdstat_client|reply", "cmdstat_client"):  # Redis 7 counts subcommands apart
            calls[name] = int(stats.split("calls=")[1].split(",")[0])
    return calls.get("cmdstat_client|reply", calls.get("cmdstat_client", 0))


def test_an_unanswered_command_runs_in_order_and_leaves_the_replies_in_step(url: str, make: Any) -> None:
    async def body(client: Client, ns: str) -> list[Any]:
        await client.execute("SET", ns + "n", 0, "EX", 60)
        for _ in range(50):
            await client.send_unanswered(("INCRBY", ns + "n", 2))
        return await client.pipeline([("GET", ns + "n"), ("ECHO", "after"), ("INCRBY", ns + "n", 1)])

    skips = _reply_skips(url)
    assert run(url, body, make) == [b"100", b"after", 101]
    if make is RespClient:  # the lean client asked Redis for no replies (50 skips and the probe)
        assert _reply_skips(url) - skips >= 51


def test_held_unanswered_commands_go_before_the_next_write_and_never_alone_per_call(url: str, make: Any) -> None:
    """`soon=True` holds a command back: it runs before any command written after it (order as
    sent), and a held command with nothing after it still reaches Redis within the loop's turn."""
    async def body(client: Client, ns: str) -> list[Any]:
        await client.execute("SET", ns + "n", 0, "EX", 60)
        for _ in range(30):
            await client.send_unanswered(("INCRBY", ns + "n", 2), soon=True)
        await client.send_unanswered(("INCRBY", ns + "n", 1))  # written now, with the held ones first
        in_order = await client.execute("GET", ns + "n")
        await client.send_unanswered(("INCRBY", ns + "n", 5), soon=True)
        await asyncio.sleep(0)  # nothing else written: the loop's turn sends it
        await asyncio.sleep(0.05)
        other = make(url)  # another connection sees it: it reached Redis on its own
        try:
            alone = await other.execute("GET", ns + "n")
        finally:
            await other.close()
        return [in_order, alone, await client.execute("GET", ns + "n")]

    assert run(url, body, make) == [b"61", b"66", b"66"]


@pytest.fixture
def redis_without_client_command(url: str) -> Iterator[str]:
    """A Redis of its own with the CLIENT command renamed away, as some proxies and managed
    services have it: the lean client must fall back to awaiting replies."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server binary to start a second Redis")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               "--rename-command", "CLIENT", ""], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the second Redis did not start"
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


def test_a_server_without_client_reply_gets_unanswered_commands_answered(redis_without_client_command: str) -> None:
    async def body(client: RespClient, ns: str) -> list[Any]:
        await client.execute("SET", ns + "s", "text", "EX", 60)
        for _ in range(20):
            await client.send_unanswered(("INCRBY", ns + "n", 5))
        with pytest.raises(RedisReplyError, match="WRONGTYPE"):  # awaited here, so its error is seen
            await client.send_unanswered(("LPUSH", ns + "s", "x"))
        return await client.pipeline([("GET", ns + "n"), ("ECHO", "after")])

    assert run(redis_without_client_command, body) == [b"100", b"after"]

"""Request bodies are capped while they arrive, against the running server.

The client here is a raw socket, because the point is what the server does with bytes it has not
read yet: it answers 413 at the cap (or at once when Content-Length says more), closes the
connection instead of reading the rest, checks keys before bodies, and cuts off a body that
trickles in.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from tests.harness import Backend, Server, Upstream, auth, serving

MIB = 1024 * 1024
GRACE_S = 1.5

_CONFIG = """
[limits]
body_timeout_s = {grace}

[[models]]
id = "mock-chat"
base_url = "{{upstream}}/v1"
upstream_model = "mock"
""".format(grace=GRACE_S)


@pytest.fixture(scope="module")
def limits_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """A server whose body grace period is short, so a trickling body is cut off quickly."""
    with serving(tmp_path_factory.mktemp("limits"), backend, upstream, _CONFIG) as srv:
        yield srv


@dataclass
class RawReply:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float
    body_bytes_sent: int
    closed: bool

    def json(self) -> dict:
        return dict(orjson.loads(self.body))


def rss_bytes(pid: int) -> int:
    """The resident set size of process `pid`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _parse(raw: bytes) -> tuple[int, dict[str, str], bytes] | None:
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    if len(rest) < length:
        return None
    return int(lines[0].split()[1]), headers, rest[:length]


def raw_post(base: str, path: str, headers: dict[str, str], total: int, *, chunked: bool = False,
             declare: int | None = None, piece: int = MIB, stall_after: int | None = None,
             timeout: float = 30.0, content_type: str = "application/json",
             pieces: Iterator[bytes] | None = None) -> RawReply:
    """POST `total` bytes of JSON-ish filler, stopping as soon as the server answers.

    `chunked` sends Transfer-Encoding: chunked (no length declared); `declare` sets Content-Length
    (default: the true total); `stall_after` stops sending after that many bytes and waits;
    `pieces` replaces the filler with these bytes (`total` then only bounds them)."""
    url = urlsplit(base)
    sock = socket.create_connection((url.hostname, url.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 256 * 1024)
    lines = [f"POST {path} HTTP/1.1", f"Host: {url.hostname}", f"Content-Type: {content_type}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {declare if declare is not None else total}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    started = time.monotonic()
    received = b""
    sent = 0
    filler = b"[" + b"1," * (piece // 2 - 1) + b"1"
    sending = True
    closed = False
    while time.monotonic() - started < timeout:
        if sending and stall_after is not None and sent >= stall_after:
            sending = False
        readable, writable, _ = select.select([sock], [sock] if sending else [], [], 0.5)
        if readable:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                closed = True
                break
            if not data:
                closed = True
                break
            received += data
            if _parse(received) is not None:
                sending = False
                # The refusal closes the connection: wait briefly to see it close.
                sock.settimeout(2)
                try:
                    closed = sock.recv(65536) == b""
                except (ConnectionResetError, socket.timeout):
                    closed = True
                break
        if writable and sending:
            limit = total if stall_after is None else min(total, stall_after)
            chunk = filler[: min(piece, limit - sent)] if pieces is None else next(pieces, b"")
            if not chunk:
                total = sent
            frame = (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n") if chunked else chunk
            try:
                if chunk:
                    sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError):
                sending = False
                continue
            sent += len(chunk)
            if sent >= total:
                sending = False
                if chunked:
                    try:
                        sock.sendall(b"0\r\n\r\n")
                    except (BrokenPipeError, ConnectionResetError):  # refused at the cap meanwhile
                        continue
    seconds = time.monotonic() - started
    sock.close()
    parsed = _parse(received)
    assert parsed is not None, f"no complete reply after {seconds:.1f} s ({sent} bytes sent, got {received[:200]!r})"
    status, reply_headers, body = parsed
    return RawReply(status, reply_headers, body, seconds, sent, closed)


def test_100_mb_unauthenticated_exchange_is_refused_at_the_cap(limits_server: Server) -> None:
    """The exchange reads its body before any key: 413 at 64 KiB, the rest never read, RSS flat."""
    pid = limits_server.process.pid
    before = rss_bytes(pid)
    for chunked in (True, False):
        reply = raw_post(limits_server.base_url, "/v1/auth/exchange", {}, 100 * MIB, chunked=chunked,
                         declare=None if chunked else 100 * MIB)
        assert reply.status == 413, reply.body
        assert reply.json()["error"]["code"] == "request_too_large"
        assert reply.json()["error"]["type"] == "invalid_request_error"
        assert reply.seconds < 5
        assert reply.body_bytes_sent < 40 * MIB  # socket buffers hold a few MiB; the server read ~64 KiB
        assert reply.closed
    assert rss_bytes(pid) - before < 64 * MIB


def test_100_mb_without_a_key_is_401_before_the_body(limits_server: Server) -> None:
    """Keyed routes check the key first: no key, no body read, in each route's envelope."""
    pid = limits_server.process.pid
    before = rss_bytes(pid)
    for path in ("/v1/chat/completions", "/v1/batches", "/v1/files", "/v1/conversations"):
        reply = raw_post(limits_server.base_url, path, {}, 100 * MIB, chunked=True)
        assert reply.status == 401, (path, reply.body)
        assert reply.seconds < 5
        assert reply.body_bytes_sent < 40 * MIB
        if path == "/v1/conversations":
            assert reply.json()["success"] is False and reply.json()["code"] == "missing_api_key"
        else:
            assert reply.json()["error"]["type"] == "authentication_error"
    assert rss_bytes(pid) - before < 64 * MIB


def test_caps_per_route_with_a_valid_key(limits_server: Server) -> None:
    """32 MiB on the hot routes, 1 MiB on other JSON routes, in the route's envelope."""
    app_key = limits_server.create_key()
    user_key = limits_server.create_user_key(app_key)
    cases = [("/v1/chat/completions", app_key, 32 * MIB), ("/v1/embeddings", app_key, 32 * MIB),
             ("/v1/batches", app_key, MIB), ("/v1/images/generations", app_key, MIB),
             ("/v1/audio/speech", app_key, MIB), ("/v1/conversations", user_key, MIB)]
    for path, key, cap in cases:
        for chunked in (True, False):
            reply = raw_post(limits_server.base_url, path, auth(key), cap + 2 * MIB, chunked=chunked)
            assert reply.status == 413, (path, chunked, reply.body)
            body = reply.json()
            code = body["code"] if path.startswith("/v1/conversations") else body["error"]["code"]
            assert code == "request_too_large", (path, body)
            assert reply.closed


def multipart_files(boundary: str, count: int, size: int) -> Iterator[bytes]:
    """A valid multipart/form-data body of `count` file parts of `size` bytes each."""
    for index in range(count):
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"f{index}\"; filename=\"f{index}.txt\"\r\n"
               f"Content-Type: text/plain\r\n\r\n").encode() + b"a" * size + b"\r\n"
    yield f"--{boundary}--\r\n".encode()


def test_multipart_generate_counts_every_part(limits_server: Server) -> None:
    """A multipart generate may hold 50 MB in all: many parts, each small, still cross it (413)."""
    user_key = limits_server.create_user_key(limits_server.create_key())
    boundary = "inferd-test-boundary"
    reply = raw_post(limits_server.base_url, "/v1/conversations/1/generate?model=mock-chat", auth(user_key),
                     80 * MIB, chunked=True, content_type=f"multipart/form-data; boundary={boundary}",
                     pieces=multipart_files(boundary, 80, MIB // 2 * 2))
    assert reply.status == 413, reply.body
    assert reply.json() == {"success": False, "message": reply.json()["message"], "code": "request_too_large"}
    assert 50 * 1000 * 1000 <= reply.body_bytes_sent < 75 * MIB
    # Declared over every upload cap: refused before a byte is read.
    for path, declared in (("/v1/files", 66 * MIB), ("/v1/audio/transcriptions", 77 * MIB),
                           ("/v1/conversations/1/files/vectorize", 52 * 1000 * 1000)):
        key = user_key if "conversations" in path else limits_server.create_key()
        reply = raw_post(limits_server.base_url, path, auth(key), 4 * MIB, declare=declared,
                         content_type=f"multipart/form-data; boundary={boundary}")
        assert reply.status == 413, (path, reply.body)
        assert reply.body_bytes_sent <= 4 * MIB


def test_bodies_under_the_cap_still_reach_the_route(limits_server: Server) -> None:
    """Just under a cap the body is read and judged by the route as before."""
    app_key = limits_server.create_key()
    padding = "x" * (MIB - 200)
    reply = httpx.post(limits_server.base_url + "/v1/batches", headers=auth(app_key), timeout=30,
                       json={"input_file_id": "file-missing", "endpoint": "/v1/chat/completions",
                             "completion_window": "24h", "metadata": {"pad": padding[:10]}, "pad": padding})
    assert reply.status_code in (400, 404), reply.text
    assert reply.json()["error"]["code"] != "request_too_large"
    # Over the 1 MiB of cold routes, well under the 32 MiB of the hot ones (counted by estimate,
    # so the fake upstream, which takes 1 MiB at most, is not involved).
    big_chat = {"model": "mock-chat", "messages": [{"role": "user", "content": "y " * (2 * MIB)}]}
    reply = httpx.post(limits_server.base_url + "/v1/chat/count_tokens", headers=auth(app_key), json=big_chat,
                       timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["input_tokens"] > 0
    reply = httpx.post(limits_server.base_url + "/v1/auth/exchange", json={"idp_token": "a" * (60 * 1024)}, timeout=30)
    assert reply.status_code in (401, 503), reply.text  # judged by the route: no key, or no idp


def test_unknown_routes_and_methods_keep_their_errors(limits_server: Server) -> None:
    """Pre-checking keys does not turn a 404 or a 405 into a 401."""
    reply = httpx.post(limits_server.base_url + "/v1/no-such-route", content=b"{}")
    assert reply.status_code == 404
    assert reply.json()["error"]["code"] == "unknown_route"
    reply = httpx.put(limits_server.base_url + "/v1/batches", content=b"{}")
    assert reply.status_code == 405


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/batches", "/v1/auth/exchange"])
def test_a_trickling_body_is_cut_off(limits_server: Server, path: str) -> None:
    """A body that stops arriving frees its worker after the grace period with 408."""
    headers = {} if path == "/v1/auth/exchange" else auth(limits_server.create_key())
    reply = raw_post(limits_server.base_url, path, headers, 1000, piece=10, stall_after=10, timeout=GRACE_S + 15)
    assert reply.status == 408, reply.body
    assert reply.json()["error"]["code"] == "request_timeout"
    assert GRACE_S - 0.2 <= reply.seconds < GRACE_S + 10
    assert reply.closed
    # The server still answers others.
    assert httpx.get(limits_server.base_url + "/openapi.json", timeout=10).status_code == 200

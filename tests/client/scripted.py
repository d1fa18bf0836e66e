"""A small scripted HTTP server for the client's retry and SSE tests: it answers each request
with the next reply of a script (the last one repeats) and records what it received.

It stands in for a misbehaving inferd (429 with Retry-After, 503, split SSE frames) that the real
server cannot be made to produce on demand.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator


@dataclass
class Reply:
    """One scripted answer: status, headers, and a body sent as one piece or as several writes."""

    status: int = 200
    body: bytes | list[bytes] = b"{}"
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    delay: float = 0.0  # seconds before answering (client timeouts)
    pause: float = 0.0  # seconds between the pieces of a list body (forces separate reads)


@dataclass
class Seen:
    """One request the server received."""

    method: str
    path: str
    body: bytes
    headers: dict[str, str]


class ScriptedServer:
    """Serves `script` on 127.0.0.1 in a thread."""

    def __init__(self) -> None:
        self.script: list[Reply] = [Reply()]
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # close-delimited bodies, so pieces are written as they come

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                reply = outer._next(Seen(self.command, self.path, body, dict(self.headers)))
                time.sleep(reply.delay)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                pieces = reply.body if isinstance(reply.body, list) else [reply.body]
                if not isinstance(reply.body, list):
                    self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                try:
                    for piece in pieces:
                        self.wfile.write(piece)
                        self.wfile.flush()
                        time.sleep(reply.pause)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_DELETE = do_PATCH = _answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.seen.append(seen)
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def answer(self, *replies: Reply) -> None:
        """Replace the script and forget what was seen."""
        with self._lock:
            self.script = list(replies) or [Reply()]
            self.seen = []

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def json_reply(status: int, body: bytes, **headers: str) -> Reply:
    """A JSON reply with extra headers (`retry_after="2"` gives `Retry-After: 2`)."""
    names = {k.replace("_", "-").title(): v for k, v in headers.items()}
    return Reply(status, body, {"Content-Type": "application/json", **names})


def iter_server() -> Iterator[ScriptedServer]:
    """A server for one test module (stopped after)."""
    server = ScriptedServer()
    try:
        yield server
    finally:
        server.stop()

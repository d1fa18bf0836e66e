"""A webhook receiver for the alert tests: a real HTTP server on 127.0.0.1 (in a thread of the
test process) that records every POST and answers the status it is told; it can be stopped and
started again on the same port (a receiver that is down refuses connections)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import orjson


@dataclass(frozen=True)
class Delivery:
    """One POST received and what it was answered."""

    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    status: int

    def json(self) -> dict[str, Any]:
        """The body, parsed."""
        return dict(orjson.loads(self.body))


class Receiver:
    """Records POSTs; answers `status` (200 unless told otherwise)."""

    def __init__(self) -> None:
        self.status = 200
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """Where to POST."""
        return f"http://127.0.0.1:{self.port}/hooks/inferd"

    def start(self) -> "Receiver":
        """Listen (on the port of a previous start, if any)."""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                status = receiver.status
                with receiver._lock:
                    receiver.deliveries.append(Delivery(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                        body, status))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening: connections are refused until `start` again."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def answered(self, status: int = 200, where: Callable[[dict[str, Any]], bool] = lambda _: True) -> list[Delivery]:
        """Deliveries answered `status` whose body matches `where`."""
        with self._lock:
            return [d for d in self.deliveries if d.status == status and where(d.json())]

    def wait_for(self, count: int, where: Callable[[dict[str, Any]], bool], status: int = 200,
                 timeout: float = 20.0) -> list[Delivery]:
        """Wait until at least `count` deliveries answered `status` match `where`; them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.answered(status, where)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{len(self.answered(status, where))} of {count} deliveries arrived "
                             f"(all received: {[d.json() for d in self.deliveries]})")

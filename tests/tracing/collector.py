"""Stand-ins for an OpenTelemetry collector on loopback: one that takes OTLP/HTTP exports
(protobuf `ExportTraceServiceRequest`, decoded with the protocol's own generated classes) and
keeps their spans, and one that accepts connections and never answers."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                     ExportTraceServiceResponse)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUS_CODES = {0: "unset", 1: "ok", 2: "error"}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass
class Span:
    """One received span, its ids as lowercase hex."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status: str
    status_message: str
    resource: dict[str, Any]
    scope: str
    events: list[dict[str, Any]] = field(default_factory=list)


class Collector:
    """An OTLP/HTTP traces endpoint on 127.0.0.1: `POST /v1/traces`, answered 200 (or `status`,
    a refusal that is not retried, without keeping the spans)."""

    def __init__(self, status: int = 200) -> None:
        self.spans: list[Span] = []
        self.paths: list[str] = []
        self.refused = 0
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if status == 200:
                    collector._take(self.path, body)
                else:
                    collector.refused += 1
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _take(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(Span(
                        name=span.name, kind=SPAN_KINDS[span.kind], trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(), parent_span_id=span.parent_span_id.hex(),
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        status=STATUS_CODES[span.status.code], status_message=span.status.message,
                        resource=resource, scope=scope_spans.scope.name,
                        events=[{"name": e.name, "attributes": {kv.key: _value(kv.value) for kv in e.attributes}}
                                for e in span.events]))
        with self._lock:
            self.paths.append(path)
            self.spans.extend(received)

    def wait_for(self, found: Callable[[list[Span]], Any], timeout: float = 15.0) -> Any:
        """Poll the received spans until `found(spans)` is truthy; that value (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            value = found(spans)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"spans not received in {timeout} s; got {[s.name for s in spans]}")
            time.sleep(0.1)

    def trace(self, trace_id: str, count: int, timeout: float = 15.0) -> list[Span]:
        """The spans of one trace, once at least `count` have arrived."""
        return list(self.wait_for(lambda spans: (mine := [s for s in spans if s.trace_id == trace_id])
                                  and len(mine) >= count and mine, timeout))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class SilentCollector:
    """Accepts TCP connections on 127.0.0.1 and reads what comes, never answering a byte."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.connections: list[socket.socket] = []
        self.bytes_received = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self.connections.append(connection)
            threading.Thread(target=self._drain, args=(connection,), daemon=True).start()

    def _drain(self, connection: socket.socket) -> None:
        try:
            while chunk := connection.recv(65536):
                self.bytes_received += len(chunk)
        except OSError:
            pass

    def close(self) -> None:
        self._closed = True
        self._socket.close()
        for connection in self.connections:
            connection.close()

"""A span as the request path records it: ids, times, attributes, an error type (or none)."""

from __future__ import annotations

import random
import time
from typing import Any

# OpenTelemetry's SpanKind values (export.py maps them): no import of the SDK on the request path.
INTERNAL = 1
SERVER = 2
CLIENT = 3

new_id = random.getrandbits  # ids need uniqueness, not secrecy (as the SDK's RandomIdGenerator)


class SpanRecord:
    """One span. `end_ns` is 0 while it is open; `error` names the failure (a type or code, never
    a message, which may quote the prompt)."""

    __slots__ = ("name", "kind", "trace_id", "span_id", "parent_id", "remote_parent", "sampled", "tracestate",
                 "start_ns", "end_ns", "attributes", "error")

    def __init__(self, name: str, kind: int, trace_id: int, parent_id: int | None, sampled: bool,
                 attributes: dict[str, Any], remote_parent: bool = False, tracestate: str | None = None) -> None:
        self.name = name
        self.kind = kind
        self.trace_id = trace_id
        self.span_id = new_id(64) or 1  # an all-zero id is invalid
        self.parent_id = parent_id
        self.remote_parent = remote_parent
        self.sampled = sampled
        self.tracestate = tracestate
        self.start_ns = time.time_ns()
        self.end_ns = 0
        self.attributes = attributes
        self.error: str | None = None

    def traceparent(self) -> str:
        """This span as a W3C `traceparent` value (what an upstream continues)."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"

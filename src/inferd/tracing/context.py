"""The context variables tracing shares with the corridor; no OpenTelemetry import.

`active`: the span that spans started now are children of (the request's server span, or a
generate turn's retrieval span while it runs). `attempting`: the engine attempt under way, whose
trace headers the HTTP engines send upstream (engines/openai_http.py). Context variables,
as the request note is (observe/requests.py): they cross every layer, and each request's task
has its own.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from inferd.tracing.records import SpanRecord


class Attempt(Protocol):
    """What an engine reads of the attempt under way (spans.py `AttemptSpan`)."""

    headers: dict[str, str]  # traceparent (and the client's tracestate)


active: ContextVar["SpanRecord | None"] = ContextVar("inferd_trace_active", default=None)
attempting: ContextVar[Attempt | None] = ContextVar("inferd_trace_attempt", default=None)

# version-traceid-parentid-flags; a later version may add fields after a dash (W3C Trace Context).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def parse_traceparent(value: str) -> tuple[int, int, int] | None:
    """(trace id, parent span id, flags) of a valid `traceparent`, else None (the request then
    starts a trace of its own, as W3C Trace Context says)."""
    found = _TRACEPARENT.fullmatch(value.strip())
    if found is None:
        return None
    version, trace, parent, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    trace_id, parent_id = int(trace, 16), int(parent, 16)
    if not trace_id or not parent_id:
        return None
    return trace_id, parent_id, int(flags, 16)

"""The `openai` engine's SSE splitter: the events a relay reads from an upstream's stream."""

from __future__ import annotations

import random

from inferd.engines.openai_http import _split_events


def test_sse_events_split_alike_on_the_fast_path_and_the_general_one() -> None:
    """The relay's splitter (engines/openai_http.py) takes a one-`split` path when a read holds
    only `data: ` events; any other shape (comments, `event:` lines, `data:` without its space,
    multi-line data, CRLF, empty events) goes event by event. Both give the events and the rest
    the line-by-line rule gives, piece boundaries anywhere."""
    def by_lines(buffer: bytes) -> tuple[list[bytes], bytes]:
        buffer = buffer.replace(b"\r\n", b"\n")
        events: list[bytes] = []
        *complete, rest = buffer.split(b"\n\n")
        for event in complete:
            data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
            if data:
                events.append(b"\n".join(data))
        return events, rest

    assert _split_events(b'data: {"a":1}\n\ndata: [DONE]\n\ndata: {"b') == ([b'{"a":1}', b"[DONE]"], b'data: {"b')
    assert _split_events(b'data:{"a":1}\r\n\r\n: keep-alive\n\nevent: x\ndata: 1\ndata: 2\n\n') == \
        ([b'{"a":1}', b"1\n2"], b"")
    atoms = [b"data: ", b"data:", b"\n", b"\n\n", b"\r\n", b'{"x": 1}', b"[DONE]", b"event: e", b": c", b"a "]
    rng = random.Random(7)
    for _ in range(20000):
        stream = b"".join(rng.choice(atoms) for _ in range(rng.randint(0, 14)))
        cuts = sorted(rng.sample(range(len(stream) + 1), min(2, len(stream) + 1)))
        buffer, got = b"", []
        for start, end in zip([0, *cuts], [*cuts, len(stream)]):
            events, buffer = _split_events(buffer + stream[start:end])
            got += events
        want, rest = by_lines(stream)
        assert (got, buffer.replace(b"\r\n", b"\n")) == (want, rest), stream

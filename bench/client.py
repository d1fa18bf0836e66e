"""What inferd_client costs the calling process per call, next to bare httpx and the openai SDK.

All three talk to the fake upstream (`tests/fakes/upstream.py`, the chat-completion wire shape,
a separate process) over one kept-alive connection, one call at a time. The number that matters
is the client process's CPU time per call (`time.process_time`), which the server's work does
not touch: blocking calls (parse into typed objects), 16-chunk streams (SSE decode + typed
chunks), and the SSE decoder alone on 20,000 frames.

Run: `.venv/bin/python bench/client.py [--calls 1000]`
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import openai

from inferd_client import Client, SSEDecoder

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [{"role": "user", "content": "Hello there"}]


def start_upstream() -> tuple[subprocess.Popen[str], str]:
    """The fake upstream on a free port."""
    process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes" / "upstream.py"), "--port", "0"],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, f"http://127.0.0.1:{int(line.split()[1])}"


def measure(label: str, calls: int, work: Callable[[], Any]) -> tuple[str, float, float]:
    """CPU and wall microseconds per call (after 50 warm-up calls)."""
    for _ in range(50):
        work()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        work()
    return label, (time.process_time() - cpu) / calls * 1e6, (time.perf_counter() - wall) / calls * 1e6


def sse_decode_rate() -> tuple[float, float]:
    """MB/s and µs per event for the decoder alone, fed 16 KiB reads."""
    frame = b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                    "choices": [{"index": 0, "delta": {"content": " word"},
                                                 "finish_reason": None}]}).encode() + b"\n\n"
    wire = frame * 20_000
    started = time.process_time()
    decoder, events = SSEDecoder(), 0
    for offset in range(0, len(wire), 16_384):
        events += len(decoder.feed(wire[offset:offset + 16_384]))
    spent = time.process_time() - started
    return len(wire) / spent / 1e6, spent / events * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    calls = parser.parse_args().calls
    process, url = start_upstream()
    body = {"model": "mock", "messages": MESSAGES}
    try:
        with httpx.Client(base_url=url, timeout=30) as raw, Client(url, "k", timeout=30) as ours, \
                openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as sdk:
            def raw_stream() -> None:
                with raw.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
                    for _ in response.iter_lines():
                        pass

            def our_stream() -> None:
                with ours.chat_stream("mock", MESSAGES) as stream:
                    for _ in stream:
                        pass

            def sdk_stream() -> None:
                for _ in sdk.chat.completions.create(model="mock", messages=MESSAGES, stream=True):  # type: ignore
                    pass

            rows = [
                measure("blocking, bare httpx (json())", calls, lambda: raw.post("/v1/chat/completions",
                                                                                 json=body).json()),
                measure("blocking, inferd_client", calls, lambda: ours.chat("mock", MESSAGES)),
                measure("blocking, openai SDK", calls,
                        lambda: sdk.chat.completions.create(model="mock", messages=MESSAGES)),  # type: ignore
                measure("stream, bare httpx (iter_lines)", calls, raw_stream),
                measure("stream, inferd_client", calls, our_stream),
                measure("stream, openai SDK", calls, sdk_stream),
            ]
    finally:
        process.kill()
        process.wait()
    print(f"{'client':34} {'CPU µs/call':>12} {'wall µs/call':>13}")
    for label, cpu, wall in rows:
        print(f"{label:34} {cpu:12.0f} {wall:13.0f}")
    rate, per_event = sse_decode_rate()
    print(f"SSE decoder alone: {rate:.1f} MB/s, {per_event:.2f} µs per event")


if __name__ == "__main__":
    main()

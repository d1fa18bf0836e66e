"""Load generator for bench/overhead.py: closed-loop keep-alive clients, one JSON result line.

Runs in its own process (overhead.py pins it to the client core). `--concurrency` workers each
hold one keep-alive connection and send the same POST back to back. After `--warmup` seconds the
measured phase starts: the gateway's CPU (utime+stime of its process tree, from /proc) is read at
its first and last instant, every completion inside it is counted, and the latency of every
request that both started and finished inside it is kept. The phase lasts `--duration` seconds,
or until `--requests` completions.

The default client speaks HTTP/1.1 itself on asyncio protocols with httptools (the parser uvicorn
uses) so that it costs a fraction of what the servers it drives cost; `--client aiohttp` uses an
aiohttp ClientSession instead, for cross-checking. A response counts as ok when its status is 200
and, for streams, its body ends with `data: [DONE]` (or the `--stream-end` line).

`--timeline S` (bench/pools.py) also writes `measuring <epoch seconds>` to stderr the instant the
measured phase starts, and adds to the result `timeline`: every S seconds of the measured phase,
`[seconds since its start, ok so far, failed so far, gateway CPU seconds so far]` (the last row is
the phase's end), and `started_epoch`. Without it nothing of this runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DONE = b"data: [DONE]"


# ---------------------------------------------------------------------------------------------
# CPU accounting from /proc


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime+stime+cutime+cstime in ticks) of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            raw = stat_file.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()  # fields[0] is field 3 (state) of proc(5)
    return int(fields[1]), sum(int(value) for value in fields[11:15])


def tree_cpu_seconds(root_pid: int) -> float:
    """CPU seconds used so far by a process and all its descendants (threads included)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _proc_stat(int(entry))
        if stat is not None:
            children.setdefault(stat[0], []).append(int(entry))
            ticks[int(entry)] = stat[1]
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / CLOCK_TICKS


def self_cpu_seconds() -> float:
    """CPU seconds used so far by this process."""
    times = os.times()
    return times.user + times.system


def core_seconds(cores: list[int]) -> tuple[float, float]:
    """(busy, stolen) seconds of these cores so far, from /proc/stat.

    Busy is user+nice+system+irq+softirq; stolen is the time the hypervisor ran something else.
    """
    wanted = {f"cpu{core}".encode() for core in cores}
    busy = steal = 0
    with open("/proc/stat", "rb") as stat_file:
        for line in stat_file:
            fields = line.split()
            if fields and fields[0] in wanted and len(fields) > 8:
                busy += sum(int(fields[index]) for index in (1, 2, 3, 6, 7))
                steal += int(fields[8])
    return busy / CLOCK_TICKS, steal / CLOCK_TICKS


# ---------------------------------------------------------------------------------------------
# Bookkeeping shared by both clients


@dataclass
class Run:
    """Phase control and what the measured phase saw."""

    measure_requests: int
    gateway_pid: int | None
    client_pids: list[int]
    cores: list[int]
    phase: str = "warmup"  # warmup -> measure -> stop
    started_at: float = 0.0
    ended_at: float = 0.0
    completed: int = 0
    ok: int = 0
    failed: int = 0
    warmup_failed: int = 0
    connections: int = 0  # opened in the whole run; about the concurrency when keep-alive holds
    latencies: list[float] = field(default_factory=list)
    failure_samples: list[str] = field(default_factory=list)
    cpu_start: dict[str, float] = field(default_factory=dict)
    cpu_end: dict[str, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def snapshot(self) -> dict[str, float]:
        """CPU seconds of the gateway, of this process, of the upstream, and stolen from the cores."""
        busy, steal = core_seconds(self.cores)
        cpu = {"loadgen": self_cpu_seconds(), "upstream": sum(tree_cpu_seconds(pid) for pid in self.client_pids),
               "cores_busy": busy, "steal": steal}
        if self.gateway_pid:
            cpu["gateway"] = tree_cpu_seconds(self.gateway_pid)
        return cpu

    def begin(self) -> None:
        """Start the measured phase."""
        self.cpu_start = self.snapshot()
        self.started_at = time.perf_counter()
        self.phase = "measure"

    def end(self) -> None:
        """End the measured phase (idempotent)."""
        if self.phase != "measure":
            return
        self.ended_at = time.perf_counter()
        self.cpu_end = self.snapshot()
        self.phase = "stop"
        self.done.set()

    def record(self, sent_at: float, ok: bool, failure: str | None) -> None:
        """Account one finished request (ok or not)."""
        if not ok and len(self.failure_samples) < 5 and failure:
            self.failure_samples.append(failure)
        if self.phase == "warmup":
            self.warmup_failed += not ok
            return
        if self.phase != "measure":
            return
        self.completed += 1
        if ok:
            self.ok += 1
            if sent_at >= self.started_at:
                self.latencies.append(time.perf_counter() - sent_at)
        else:
            self.failed += 1
        if self.measure_requests and self.completed >= self.measure_requests:
            self.end()

    def result(self) -> dict[str, Any]:
        """The measured phase as one JSON-able dict."""
        wall = self.ended_at - self.started_at
        latencies = sorted(self.latencies)

        def percentile(fraction: float) -> float | None:
            if not latencies:
                return None
            return latencies[min(len(latencies) - 1, int(fraction * len(latencies)))] * 1000

        def used(name: str) -> float:
            return self.cpu_end[name] - self.cpu_start[name]

        gateway_cpu = used("gateway") if self.gateway_pid else None
        per_request = 1e6 / self.ok if self.ok else 0.0
        return {
            "wall_s": wall, "completed": self.completed, "ok": self.ok, "failed": self.failed,
            "warmup_failed": self.warmup_failed, "failure_samples": self.failure_samples,
            "rps": self.completed / wall if wall else 0.0,
            "p50_ms": percentile(0.50), "p90_ms": percentile(0.90), "p99_ms": percentile(0.99),
            "mean_ms": sum(latencies) / len(latencies) * 1000 if latencies else None,
            "latency_samples": len(latencies), "connections": self.connections,
            "gateway_cpu_s": gateway_cpu,
            "gateway_cpu_us_per_req": gateway_cpu / self.ok * 1e6 if gateway_cpu is not None and self.ok else None,
            "gateway_core_busy": gateway_cpu / wall if gateway_cpu is not None and wall else None,
            "client_core_busy": (used("loadgen") + used("upstream")) / wall if wall else None,
            "loadgen_cpu_us_per_req": used("loadgen") * per_request,
            "upstream_cpu_us_per_req": used("upstream") * per_request,
            # Whatever else ran on the two cores (other processes, the hypervisor), in cores' worth:
            # a run with much of it is noisy.
            "steal": used("steal") / wall if wall and self.cores else None,
            "foreign": max(0.0, used("cores_busy") - used("loadgen") - used("upstream") - (gateway_cpu or 0.0))
            / wall if wall and self.cores else None,
        }


def _check(status: int, body_tail: bytes, stream_end: bytes | None, body_head: bytes) -> str | None:
    """None when the response is good, else a short description of what was wrong. `stream_end`:
    the last line a stream must end with (None: not a stream)."""
    if status == 200 and (stream_end is None or body_tail.rstrip().endswith(stream_end)):
        return None
    what = f"status {status}" if status != 200 else f"stream did not end with {stream_end!r}"
    return f"{what}: {body_head[:300]!r}{' ... ' + repr(body_tail[-80:]) if stream_end else ''}"


# ---------------------------------------------------------------------------------------------
# Raw HTTP/1.1 client on asyncio protocols + httptools


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.parser_error = httptools.HttpParserError
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, bytes, bytes]] | None = None
        self.closed = False
        self.keep_alive = True
        self.status = 0
        self.head = b""
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except self.parser_error as error:
            self._fail(ConnectionError(f"bad HTTP response: {error}"))
            if self.transport:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.status and not self.keep_alive:  # a close-delimited body ends here
            self._finish()
        self._fail(ConnectionError(f"connection lost: {exc}"))

    def on_message_begin(self) -> None:
        self.status, self.head, self.tail = 0, b"", b""

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        if len(self.head) < 300:
            self.head += body[:300]
        self.tail = (self.tail + body)[-64:]

    def on_message_complete(self) -> None:
        self._finish()

    def _finish(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.status, self.head, self.tail))

    def _fail(self, error: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)


async def raw_worker(run: Run, host: str, port: int, request: bytes, stream: bytes | None) -> None:
    """Send the request back to back on one keep-alive connection until the run stops."""
    loop = asyncio.get_running_loop()
    connection: _Connection | None = None
    while run.phase != "stop":
        sent_at = time.perf_counter()
        try:
            if connection is None or connection.closed:
                _, connection = await loop.create_connection(_Connection, host, port)
                run.connections += 1
            connection.waiter = loop.create_future()
            connection.transport.write(request)  # type: ignore[union-attr]
            status, head, tail = await connection.waiter
        except OSError as error:  # ConnectionError included
            run.record(sent_at, False, f"{type(error).__name__}: {error}")
            connection = None
            await asyncio.sleep(0.01)
            continue
        failure = _check(status, tail, stream, head)
        run.record(sent_at, failure is None, failure)
        if not connection.keep_alive:
            connection.transport.close()  # type: ignore[union-attr]
            connection = None
    if connection is not None and connection.transport is not None:
        connection.transport.close()


def build_request(url: str, body: bytes, headers: dict[str, str]) -> tuple[str, int, bytes]:
    """(host, port, the request's bytes) for a POST of body to url."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lines = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
             f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# ---------------------------------------------------------------------------------------------
# aiohttp client (cross-check)


async def aiohttp_worker(run: Run, session: Any, url: str, body: bytes, headers: dict[str, str],
                         stream: bytes | None) -> None:
    """Same loop as raw_worker, through an aiohttp ClientSession."""
    headers = {"Content-Type": "application/json", **headers}
    while run.phase != "stop":
        sent_at = time.perf_counter()
        try:
            async with session.post(url, data=body, headers=headers) as response:
                data = await response.read()
        except Exception as error:  # noqa: BLE001 - every client failure is counted alike
            run.record(sent_at, False, f"{type(error).__name__}: {error}")
            await asyncio.sleep(0.01)
            continue
        failure = _check(response.status, data[-64:], stream, data[:300])
        run.record(sent_at, failure is None, failure)


# ---------------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run warm-up and the measured phase; return the result."""
    body = args.body.encode()
    headers = dict(header.split(": ", 1) for header in args.header)
    stream_end = args.stream_end.encode() if args.stream else None
    run = Run(measure_requests=args.requests, gateway_pid=args.gateway_pid, client_pids=args.client_pid,
              cores=[int(core) for core in args.cores.split(",") if core])
    session = None
    if args.client == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)
        workers = [aiohttp_worker(run, session, args.url, body, headers, stream_end) for _ in range(args.concurrency)]
    else:
        host, port, request = build_request(args.url, body, headers)
        workers = [raw_worker(run, host, port, request, stream_end) for _ in range(args.concurrency)]
    tasks = [asyncio.create_task(worker) for worker in workers]
    timeline: list[list[float]] = []
    started_epoch = 0.0
    try:
        await asyncio.sleep(args.warmup)
        run.begin()
        if args.timeline:
            started_epoch = time.time()
            sys.stderr.write(f"measuring {started_epoch:.6f}\n")
            sys.stderr.flush()
            tasks.append(asyncio.create_task(sample_timeline(run, args.timeline, timeline)))
        if args.requests:
            await run.done.wait()
        else:
            await asyncio.sleep(args.duration)
            run.end()
        if args.timeline:
            timeline.append([run.ended_at - run.started_at, run.ok, run.failed,
                             run.cpu_end.get("gateway", 0.0) - run.cpu_start.get("gateway", 0.0)])
        # In-flight requests finish (and are not counted); a hung server does not hang the run.
        _, pending = await asyncio.wait(tasks, timeout=10)
        for task in pending:
            task.cancel()
    finally:
        for task in tasks:
            task.cancel()
        if session is not None:
            await session.close()
    result = run.result()
    if args.timeline:
        result["timeline"] = timeline
        result["started_epoch"] = started_epoch
    return result


async def sample_timeline(run: Run, every: float, timeline: list[list[float]]) -> None:
    """Every `every` seconds of the measured phase: [seconds, ok, failed, gateway CPU seconds] so far."""
    gateway_start = run.cpu_start.get("gateway", 0.0)
    timeline.append([0.0, 0, 0, 0.0])
    tick = 1
    while True:
        await asyncio.sleep(max(0.0, run.started_at + tick * every - time.perf_counter()))
        if run.phase != "measure":
            return
        cpu = tree_cpu_seconds(run.gateway_pid) - gateway_start if run.gateway_pid else 0.0
        timeline.append([time.perf_counter() - run.started_at, run.ok, run.failed, cpu])
        tick += 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--body", required=True, help="JSON request body")
    parser.add_argument("--header", action="append", default=[], help="'Name: value', repeatable")
    parser.add_argument("--stream", action="store_true", help="expect SSE ending with --stream-end")
    parser.add_argument("--stream-end", default=DONE.decode(),
                        help="the line a stream ends with (Anthropic's: 'data: {\"type\":\"message_stop\"}')")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of the measured phase")
    parser.add_argument("--requests", type=int, default=0, help="measure this many completions instead")
    parser.add_argument("--gateway-pid", type=int, default=None)
    parser.add_argument("--client-pid", type=int, action="append", default=[],
                        help="other processes on the client core (the upstream), repeatable")
    parser.add_argument("--cores", default="", help="cores whose steal time to report, e.g. 0,1")
    parser.add_argument("--client", choices=("raw", "aiohttp"), default="raw")
    parser.add_argument("--timeline", type=float, default=0.0,
                        help="seconds between timeline samples (bench/pools.py); 0: none")
    return parser.parse_args(argv)


if __name__ == "__main__":
    import uvloop

    arguments = parse_args()
    outcome = uvloop.run(main(arguments))
    sys.stdout.write(orjson.dumps(outcome).decode() + "\n")

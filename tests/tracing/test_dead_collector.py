"""A collector that accepts connections and never answers costs the requests nothing: calls take
as long as with a collector that answers, the spans that cannot wait are dropped and counted on
/metrics, and the server still stops promptly; spans a collector refuses are counted as lost."""

from __future__ import annotations

import re
import statistics
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.harness import Backend, Server, Upstream, auth, write_config
from tests.tracing.collector import Collector, SilentCollector
from tests.tracing.conftest import MODELS_TOML, tracing_table

CALLS = 40


def timed_calls(server: Server, key: str) -> list[float]:
    """Seconds each of CALLS blocking chat completions took, one after another."""
    seconds = []
    with httpx.Client(timeout=30) as client:
        for _ in range(CALLS):
            started = time.perf_counter()
            reply = client.post(server.v1 + "/chat/completions", headers=auth(key),
                                json={"model": "tr-chat", "messages": [{"role": "user", "content": "hi"}]})
            seconds.append(time.perf_counter() - started)
            assert reply.status_code == 200, reply.text
    return seconds


def dropped(server: Server, reason: str) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    found = re.search(rf'inferd_trace_spans_dropped_total\{{reason="{reason}"\}} ([0-9.e+]+)', text)
    assert found, text[-2000:]
    return float(found.group(1))


def test_a_collector_that_never_answers_adds_no_latency_and_drops_are_counted(
        tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream,
        silent_collector: SilentCollector, traced_server: Server, collector: Collector) -> None:
    folder: Path = tmp_path_factory.mktemp("dead-collector")
    config = write_config(folder / "inferd.toml", MODELS_TOML + tracing_table(
        otlp_endpoint=silent_collector.base_url, max_queue_size=8, export_timeout_s=60), upstream)
    server = Server.start(folder, backend, config)
    try:
        key = server.create_key(org=f"org-{uuid.uuid4().hex[:8]}")
        timed_calls(server, key)  # warm: the first export goes out within a second and hangs
        deadline = time.monotonic() + 10
        while not silent_collector.bytes_received and time.monotonic() < deadline:
            time.sleep(0.1)
        assert silent_collector.bytes_received, "the exporter never reached the collector"
        stuck = timed_calls(server, key)  # the export thread is waiting on the collector all along
        live_key = traced_server.create_key(org=f"org-{uuid.uuid4().hex[:8]}")
        timed_calls(traced_server, live_key)
        live = timed_calls(traced_server, live_key)
        # Within noise of a server whose collector answers (the machine is shared: generous
        # bounds), where a request that waited on the stuck export would take its 60 s.
        assert statistics.median(stuck) < statistics.median(live) * 2 + 0.05, (stuck, live)
        assert max(stuck) < 2.0, stuck
        assert dropped(server, "queue_full") > 0  # 160 spans against a queue of 8 and a stuck export
        assert dropped(server, "export_failed") == 0  # the stuck export has not timed out yet
        started = time.monotonic()
        server.stop()
        assert server.process.returncode is not None and time.monotonic() - started < 10
    finally:
        server.stop()


def test_spans_a_collector_refuses_are_counted_as_lost(tmp_path_factory: pytest.TempPathFactory, backend: Backend,
                                                       upstream: Upstream) -> None:
    refusing = Collector(status=400)
    folder: Path = tmp_path_factory.mktemp("refusing-collector")
    config = write_config(folder / "inferd.toml", MODELS_TOML + tracing_table(otlp_endpoint=refusing.base_url),
                          upstream)
    server = Server.start(folder, backend, config)
    try:
        key = server.create_key(org=f"org-{uuid.uuid4().hex[:8]}")
        for _ in range(3):
            reply = httpx.post(server.v1 + "/chat/completions", headers=auth(key), timeout=30,
                               json={"model": "tr-chat", "messages": [{"role": "user", "content": "hi"}]})
            assert reply.status_code == 200, reply.text
        deadline = time.monotonic() + 15
        while dropped(server, "export_failed") < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert refusing.refused >= 1
        assert dropped(server, "export_failed") == 6  # three calls, two spans each, every one refused
        assert dropped(server, "queue_full") == 0
    finally:
        server.stop()
        refusing.close()

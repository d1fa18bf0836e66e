"""A worker killed with SIGKILL at any moment loses nothing and duplicates nothing: every
custom_id lands exactly once in the output or error file, and usage rows match exactly the
lines that reached the engine. Several workers share batches safely."""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import orjson
import pytest

from tests.batches.conftest import Worker, serve_batches, batch_usage, content, create, get, request_line, wait_for
from tests.harness import Server, Upstream


def _lines(prefix: str, count: int) -> tuple[list[dict[str, Any]], set[str], set[str]]:
    """Mostly paced successes; every 50th an engine error (billed), every 97th an unknown model (not run)."""
    lines, ok, engine_failed = [], set(), set()
    for i in range(count):
        custom_id = f"{prefix}-{i}"
        if i % 97 == 0:
            lines.append(request_line(custom_id, model="no-such-model"))
        elif i % 50 == 0:
            lines.append(request_line(custom_id, model="mock-err400"))
            engine_failed.add(custom_id)
        else:
            lines.append(request_line(custom_id, model="mock-paced", content=f"line {i}"))
            ok.add(custom_id)
    return lines, ok, engine_failed


def _check_exactly_once(server: Server, key: str, batch: dict[str, Any], lines: list[dict[str, Any]],
                        ok: set[str], engine_failed: set[str]) -> list[dict[str, Any]]:
    output = content(server, key, batch["output_file_id"])
    errors = content(server, key, batch["error_file_id"])
    seen = Counter(line["custom_id"] for line in output + errors)
    assert sorted(seen) == sorted(line["custom_id"] for line in lines)
    assert set(seen.values()) == {1}, [cid for cid, n in seen.items() if n > 1]
    assert {line["custom_id"] for line in output} == ok
    assert all(line["response"]["status_code"] == 200 for line in output)
    assert batch["request_counts"] == {"total": len(lines), "completed": len(ok), "failed": len(lines) - len(ok)}
    return output


def _usage_by_line(server: Server, key: str) -> Counter[str]:
    return Counter(orjson.loads(row["metadata"])["cid"] for row in batch_usage(server, key))


def test_sigkill_mid_batch_then_restart(api_server: Server) -> None:
    key = api_server.create_key()
    lines, ok, engine_failed = _lines("k", 2000)
    batch = create(api_server, key, lines)
    worker = Worker(api_server)
    try:
        deadline = time.monotonic() + 90
        while get(api_server, key, batch["id"])["request_counts"]["completed"] < 400:
            assert time.monotonic() < deadline, worker.log_path.read_text()
            time.sleep(0.05)
    finally:
        worker.kill()  # mid-way, lines in flight, results waiting for their commit
    at_kill = get(api_server, key, batch["id"])
    assert at_kill["status"] == "in_progress"
    assert 400 <= at_kill["request_counts"]["completed"] < len(ok)

    restarted = Worker(api_server)
    try:
        done = wait_for(api_server, key, batch["id"], ("completed",), timeout=100)
    finally:
        restarted.stop()
    _check_exactly_once(api_server, key, done, lines, ok, engine_failed)
    usage = _usage_by_line(api_server, key)
    assert set(usage.values()) == {1}  # no line billed twice
    assert set(usage) == ok | engine_failed  # and exactly the lines that ran (not the refused ones)


def test_two_workers_share_batches_one_dies(api_server: Server) -> None:
    key = api_server.create_key()
    batches = []
    for b in range(3):
        lines, ok, engine_failed = _lines(f"w{b}", 300)
        batches.append((create(api_server, key, lines), lines, ok, engine_failed))
    first, second = Worker(api_server), Worker(api_server)
    try:
        deadline = time.monotonic() + 60
        while sum(get(api_server, key, b["id"])["request_counts"]["completed"] for b, *_ in batches) < 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        first.kill()  # the survivor takes its batches over once their leases expire
        finished = [wait_for(api_server, key, b["id"], ("completed",), timeout=100) for b, *_ in batches]
    finally:
        first.kill()
        second.stop()
    all_ok: set[str] = set()
    all_engine_failed: set[str] = set()
    for done, (_, lines, ok, engine_failed) in zip(finished, batches):
        _check_exactly_once(api_server, key, done, lines, ok, engine_failed)
        all_ok |= ok
        all_engine_failed |= engine_failed
    usage = _usage_by_line(api_server, key)
    assert set(usage.values()) == {1}
    assert set(usage) == all_ok | all_engine_failed


def test_sigkill_the_server_with_its_worker(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> None:
    """The same with the worker inside `inferd serve`: kill the server, start it again."""
    servers = serve_batches(tmp_path_factory, upstream, "killserve", 600, 600, batch_worker=True)
    server = next(servers)
    try:
        key = server.create_key()
        lines, ok, engine_failed = _lines("s", 1000)
        batch = create(server, key, lines)
        deadline = time.monotonic() + 60
        while get(server, key, batch["id"])["request_counts"]["completed"] < 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        server.stop(signal.SIGKILL)
        assert server.process.returncode == -signal.SIGKILL
        restarted = Server.start(server.data_dir, server.backend, server.config, batch_worker=True)
        try:
            done = wait_for(restarted, key, batch["id"], ("completed",), timeout=90)
            _check_exactly_once(restarted, key, done, lines, ok, engine_failed)
            usage = _usage_by_line(restarted, key)
        finally:
            restarted.stop()
        assert set(usage.values()) == {1}
        assert set(usage) == ok | engine_failed
    finally:
        servers.close()

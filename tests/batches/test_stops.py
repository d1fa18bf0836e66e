"""What stops a batch from outside its lines: a revoked key and the end of the
window when the engine never answers."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import orjson

from tests.batches.conftest import Worker, batch_usage, cli, content, create, request_line, wait_for, \
    wait_in_flight
from tests.harness import Server, Upstream, auth


def _cids(lines: list[dict[str, Any]]) -> list[str]:
    return sorted(line["custom_id"] for line in lines)


def _upstream_contents(upstream: Upstream, marker: str) -> list[str]:
    """The user messages of chat calls that reached the fake carrying `marker`."""
    return sorted(str(r["body"]["messages"][-1]["content"]) for r in upstream.requests()
                  if r["path"] == "/v1/chat/completions" and marker in orjson.dumps(r["body"]["messages"]).decode())


def test_revoked_key_stops_its_running_batch(batch_server: Server, upstream: Upstream) -> None:
    """Revoked with `inferd keys revoke` mid-batch: lines in flight finish, the rest go to the error
    file as `key_revoked`, the batch ends `cancelled` (seen through an admin key of the org)."""
    org = f"org-{uuid.uuid4().hex[:8]}"
    key, admin = batch_server.create_key(org=org), batch_server.create_key(org=org, key_type="admin")
    marker = f"revoke-{uuid.uuid4().hex[:8]}"
    lines = [request_line(f"r{i}", model="mock-slow", content=f"{marker} {i}") for i in range(30)]
    batch = create(batch_server, key, lines)
    wait_in_flight(upstream, marker)
    cli(batch_server, "keys", "revoke", key.split(":")[0])
    revoked_at = time.monotonic()
    assert httpx.get(f"{batch_server.v1}/batches/{batch['id']}", headers=auth(key)).status_code == 401

    done = wait_for(batch_server, admin, batch["id"], ("cancelled",), timeout=30)
    # The heartbeat looks every 2.5 s here; the lines in flight then take up to 2 s to finish.
    assert time.monotonic() - revoked_at < 15
    counts = done["request_counts"]
    output = content(batch_server, admin, done["output_file_id"])
    errors = content(batch_server, admin, done["error_file_id"])
    assert counts["total"] == 30 and counts["failed"] == 0
    assert 1 <= counts["completed"] == len(output) < 30
    assert len(errors) == 30 - counts["completed"]
    assert {line["error"]["code"] for line in errors} == {"key_revoked"}
    assert all(line["response"] is None for line in errors)
    assert _cids(output + errors) == sorted(f"r{i}" for i in range(30))  # every line once
    # Only the lines that were in flight reached the engine, each once, and each is billed.
    assert _upstream_contents(upstream, marker) == sorted(f"{marker} {c[1:]}" for c in _cids(output))
    usage = batch_usage(batch_server, key)
    assert sorted(orjson.loads(r["metadata"])["cid"] for r in usage) == _cids(output)


def test_revoked_key_stops_a_batch_no_worker_started(api_server: Server) -> None:
    """A batch waiting for a worker when its key is revoked never runs a line; a sibling key's
    batch runs as usual."""
    org = f"org-{uuid.uuid4().hex[:8]}"
    key, sibling = api_server.create_key(org=org), api_server.create_key(org=org)
    admin = api_server.create_key(org=org, key_type="admin")
    stopped = create(api_server, key, [request_line(f"w{i}") for i in range(5)])
    running = create(api_server, sibling, [request_line("s0"), request_line("s1")])
    cli(api_server, "keys", "revoke", key.split(":")[0])
    worker = Worker(api_server)
    try:
        done = wait_for(api_server, admin, stopped["id"], ("cancelled",), timeout=40)
        finished = wait_for(api_server, sibling, running["id"], ("completed",), timeout=40)
    finally:
        worker.stop()
    assert done["request_counts"] == {"total": 5, "completed": 0, "failed": 0}
    assert done["output_file_id"] is None
    errors = content(api_server, admin, done["error_file_id"])
    assert _cids(errors) == [f"w{i}" for i in range(5)]
    assert {line["error"]["code"] for line in errors} == {"key_revoked"}
    assert batch_usage(api_server, key) == []
    assert finished["request_counts"] == {"total": 2, "completed": 2, "failed": 0}


def test_expiry_aborts_lines_the_engine_never_answers(short_server: Server, upstream: Upstream) -> None:
    """5 s window, an engine with no timeout that never answers: the batch still expires within
    the job cadence; the hung lines are aborted (the engine sees the connection close) and go
    to the error file as `batch_expired`; the lines that ran are in the output file."""
    key = short_server.create_key()
    marker = f"hang-{uuid.uuid4().hex[:8]}"
    hung_before = len([a for a in upstream.aborts() if a["model"] == "mock-hang"])
    lines = [request_line("quick-0"), request_line("quick-1")] + \
        [request_line(f"hang-{i}", model="mock-hang", content=f"{marker} {i}") for i in range(3)]
    created_at = time.monotonic()
    batch = create(short_server, key, lines)
    wait_in_flight(upstream, marker)
    expired = wait_for(short_server, key, batch["id"], ("expired",), timeout=30)
    # Window 5 s, job cadence 0.6 s; the engine alone would hold these lines for 600 s.
    assert time.monotonic() - created_at < 15
    assert expired["request_counts"] == {"total": 5, "completed": 2, "failed": 0}
    output = content(short_server, key, expired["output_file_id"])
    errors = content(short_server, key, expired["error_file_id"])
    assert _cids(output) == ["quick-0", "quick-1"]
    assert _cids(errors) == ["hang-0", "hang-1", "hang-2"]
    assert {line["error"]["code"] for line in errors} == {"batch_expired"}
    deadline = time.monotonic() + 10
    while len([a for a in upstream.aborts() if a["model"] == "mock-hang"]) < hung_before + 3:
        assert time.monotonic() < deadline, "the hung engine calls were never closed"
        time.sleep(0.1)
    assert sorted(orjson.loads(r["metadata"])["cid"] for r in batch_usage(short_server, key)) == \
        ["quick-0", "quick-1"]

"""Every transition of the spec's table, what each line becomes, and how lines are billed."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest

from tests.batches.conftest import Worker, batch_usage, content, create, get, jsonl, request_line, upload, \
    stored_bytes, wait_for, wait_in_flight
from tests.harness import Server, Upstream, auth


def _by_id(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {line["custom_id"]: line for line in lines}


def test_completed_with_successes_and_failures(batch_server: Server) -> None:
    key = batch_server.create_key()
    lines = [request_line("ok-1"), request_line("ok-2", content="a b c d"), request_line("bad", model="mock-err400"),
             request_line("unknown", model="no-such-model"),
             {"custom_id": "invalid", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "mock-chat"}},
             request_line("streamed", stream=True)]
    batch = create(batch_server, key, lines)
    done = wait_for(batch_server, key, batch["id"], ("completed",))
    assert done["request_counts"] == {"total": 6, "completed": 3, "failed": 3}
    output, errors = _by_id(content(batch_server, key, done["output_file_id"])), \
        _by_id(content(batch_server, key, done["error_file_id"]))
    assert set(output) == {"ok-1", "ok-2", "streamed"} and set(errors) == {"bad", "unknown", "invalid"}
    for line in errors.values():
        assert line["response"] is None and line["id"].startswith("batch_req_")
        assert set(line["error"]) >= {"code", "message"}
    assert errors["unknown"]["error"]["code"] == "model_not_found"
    assert errors["invalid"]["error"]["status_code"] == 400
    assert errors["bad"]["error"]["status_code"] == 400
    assert "maximum context length" in errors["bad"]["error"]["message"]
    assert output["streamed"]["response"]["body"]["object"] == "chat.completion"  # lines never stream
    # Usage rows: one per line that reached the engine (the 400 from the model included).
    usage = batch_usage(batch_server, key)
    assert sorted(orjson.loads(r["metadata"])["cid"] for r in usage) == ["bad", "ok-1", "ok-2", "streamed"]
    assert {r["workspace"] for r in usage} == {"batch"}


def test_half_price_on_usage_rows(batch_server: Server) -> None:
    key = batch_server.create_key()
    batch = create(batch_server, key, [request_line(f"p{i}", content="one two three " * i) for i in range(1, 4)])
    done = wait_for(batch_server, key, batch["id"], ("completed",))
    output = _by_id(content(batch_server, key, done["output_file_id"]))
    usage = {orjson.loads(r["metadata"])["cid"]: r for r in batch_usage(batch_server, key)}
    assert set(usage) == set(output) == {"p1", "p2", "p3"}
    for cid, row in usage.items():
        reported = output[cid]["response"]["body"]["usage"]
        assert (row["prompt_tokens"], row["completion_tokens"]) == (reported["prompt_tokens"],
                                                                     reported["completion_tokens"])
        full_price = (row["prompt_tokens"] * 1.0 + row["completion_tokens"] * 2.0) / 1e6
        assert row["cost_usd"] == pytest.approx(full_price / 2, rel=1e-9)
        assert (row["status_code"], row["model"], row["deployment"]) == (200, "mock-chat", "mock-chat")
    assert batch_server.spend(key) == pytest.approx(sum(r["cost_usd"] for r in usage.values()), rel=1e-9)


def test_all_failed_has_no_output_file(batch_server: Server) -> None:
    key = batch_server.create_key()
    batch = create(batch_server, key, [request_line(f"f{i}", model="mock-err400") for i in range(3)])
    done = wait_for(batch_server, key, batch["id"], ("completed",))
    assert done["output_file_id"] is None and done["error_file_id"] is not None
    assert done["request_counts"] == {"total": 3, "completed": 0, "failed": 3}
    assert sorted(line["custom_id"] for line in content(batch_server, key, done["error_file_id"])) == \
        ["f0", "f1", "f2"]


@pytest.mark.parametrize("raw, line, code", [
    (b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\nnot json\n', 2,
     "invalid_json"),
    (jsonl([request_line("same"), request_line("other"), request_line("same")]), 3, "duplicate_custom_id"),
    (jsonl([{**request_line("g"), "method": "GET"}]), 1, "invalid_method"),
    (jsonl([request_line("u"), {**request_line("e"), "url": "/v1/embeddings"}]), 2, "invalid_url"),
    (jsonl([{"method": "POST", "url": "/v1/chat/completions", "body": {}}]), 1, "missing_custom_id"),
    (jsonl([{**request_line("b"), "body": "text"}]), 1, "invalid_body"),
    (b"\n\n", None, "empty_file"),
])
def test_whole_file_rejected(batch_server: Server, raw: bytes, line: int | None, code: str) -> None:
    key = batch_server.create_key()
    file_id = upload(batch_server, key, raw)["id"]
    batch = httpx.post(batch_server.v1 + "/batches", headers=auth(key), json={
        "input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}).json()
    assert batch["status"] == "in_progress"
    failed = wait_for(batch_server, key, batch["id"], ("failed",))
    assert failed["errors"]["object"] == "list"
    first = failed["errors"]["data"][0]
    assert (first["code"], first["line"]) == (code, line)
    assert first["message"]
    assert failed["output_file_id"] is None and failed["error_file_id"] is None
    assert failed["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    assert batch_usage(batch_server, key) == []


def test_more_than_10000_lines_rejected(batch_server: Server) -> None:
    key = batch_server.create_key()
    batch = create(batch_server, key, [request_line(f"l{i}") for i in range(10_001)])
    failed = wait_for(batch_server, key, batch["id"], ("failed",))
    assert failed["errors"]["data"][0]["code"] == "too_many_requests"
    assert failed["errors"]["data"][0]["line"] == 10_001
    assert batch_usage(batch_server, key) == []


def test_cancel_with_lines_in_flight(batch_server: Server, upstream: Upstream) -> None:
    key = batch_server.create_key()
    batch = create(batch_server, key, [request_line(f"s{i}", model="mock-slow", content=f"cancel-me {i}")
                                       for i in range(30)])
    wait_in_flight(upstream, "cancel-me")
    cancelling = httpx.post(f"{batch_server.v1}/batches/{batch['id']}/cancel", headers=auth(key)).json()
    assert cancelling["status"] == "cancelling"
    again = httpx.post(f"{batch_server.v1}/batches/{batch['id']}/cancel", headers=auth(key)).json()
    assert again["status"] in ("cancelling", "cancelled")
    done = wait_for(batch_server, key, batch["id"], ("cancelled",), timeout=30)
    counts = done["request_counts"]
    assert counts["total"] == 30 and counts["failed"] == 0
    assert 1 <= counts["completed"] <= 16  # the lines in flight drained; nothing new started
    output = content(batch_server, key, done["output_file_id"])
    errors = content(batch_server, key, done["error_file_id"])
    assert len(output) == counts["completed"]
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert sorted(line["custom_id"] for line in output + errors) == sorted(f"s{i}" for i in range(30))
    # The finished lines stay billed; the cancelled ones cost nothing.
    usage = batch_usage(batch_server, key)
    assert sorted(orjson.loads(r["metadata"])["cid"] for r in usage) == sorted(l["custom_id"] for l in output)


def test_cancel_without_a_worker_is_immediate(api_server: Server) -> None:
    key = api_server.create_key()
    batch = create(api_server, key, [request_line("c1"), request_line("c2")])
    cancelled = httpx.post(f"{api_server.v1}/batches/{batch['id']}/cancel", headers=auth(key)).json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["output_file_id"] is None
    assert get(api_server, key, batch["id"])["status"] == "cancelled"
    # A worker started later leaves it alone.
    worker = Worker(api_server)
    try:
        time.sleep(2)
    finally:
        worker.stop()
    assert get(api_server, key, batch["id"])["status"] == "cancelled"
    assert batch_usage(api_server, key) == []


def test_transient_failures_are_retried(batch_server: Server, upstream: Upstream) -> None:
    key = batch_server.create_key()
    batch = create(batch_server, key, [request_line("flaky", model="mock-flaky", content="flaky once more"),
                                       request_line("down", model="mock-err500", content="down for good")])
    done = wait_for(batch_server, key, batch["id"], ("completed",), timeout=60)
    output, errors = content(batch_server, key, done["output_file_id"]), \
        content(batch_server, key, done["error_file_id"])
    assert [l["custom_id"] for l in output] == ["flaky"]  # two 503s, then an answer
    assert [l["custom_id"] for l in errors] == ["down"]
    assert errors[0]["error"]["status_code"] == 502
    tries = [r for r in upstream.requests() if "down for good" in orjson.dumps(r["body"]["messages"]).decode()]
    assert len(tries) == 4  # 1 try + 3 retries, and the line ran once (never picked up again)
    flaky_tries = [r for r in upstream.requests() if "flaky once more" in orjson.dumps(r["body"]["messages"]).decode()]
    assert len(flaky_tries) == 3
    usage = {orjson.loads(r["metadata"])["cid"]: r for r in batch_usage(batch_server, key)}
    assert (usage["flaky"]["status_code"], usage["down"]["status_code"]) == (200, 502)


def test_budget_exceeded_lines(batch_server: Server) -> None:
    key = batch_server.create_key(budget_usd=0.00005)
    batch = create(batch_server, key, [request_line(f"b{i}", content="spend " * 10) for i in range(40)])
    done = wait_for(batch_server, key, batch["id"], ("completed",), timeout=60)
    errors = content(batch_server, key, done["error_file_id"])
    output = content(batch_server, key, done["output_file_id"])
    assert output and errors
    assert {line["error"]["code"] for line in errors} == {"budget_exceeded"}
    assert len(output) + len(errors) == 40
    usage = batch_usage(batch_server, key)
    assert sorted(orjson.loads(r["metadata"])["cid"] for r in usage) == sorted(l["custom_id"] for l in output)


def test_org_allow_list_applies(batch_server: Server) -> None:
    batch_server.create_org("only-chat", ("mock-chat",))
    key = batch_server.create_key(org="only-chat")
    batch = create(batch_server, key, [request_line("yes"), request_line("no", model="mock-other")])
    done = wait_for(batch_server, key, batch["id"], ("completed",))
    assert [l["custom_id"] for l in content(batch_server, key, done["output_file_id"])] == ["yes"]
    errors = content(batch_server, key, done["error_file_id"])
    assert [(l["custom_id"], l["error"]["code"]) for l in errors] == [("no", "model_not_allowed")]


def test_expiry_and_retention(short_server: Server) -> None:
    """5 s window: the lines done are in the output file, the rest `batch_expired`; the files
    are deleted 3 s after the terminal status by the retention job."""
    key = short_server.create_key()
    batch = create(short_server, key, [request_line(f"e{i}", model="mock-slow") for i in range(40)])
    expired = wait_for(short_server, key, batch["id"], ("expired",), timeout=40)
    counts = expired["request_counts"]
    assert counts["total"] == 40 and counts["failed"] == 0 and 1 <= counts["completed"] < 40
    output = content(short_server, key, expired["output_file_id"])
    errors = content(short_server, key, expired["error_file_id"])
    assert len(output) == counts["completed"]
    assert {line["error"]["code"] for line in errors} == {"batch_expired"}
    assert sorted(line["custom_id"] for line in output + errors) == sorted(f"e{i}" for i in range(40))
    files = [expired["output_file_id"], expired["error_file_id"], expired["input_file_id"]]
    deadline = time.monotonic() + 20
    while any(httpx.get(f"{short_server.v1}/files/{f}", headers=auth(key)).status_code == 200 for f in files[:2]):
        assert time.monotonic() < deadline, "retention job did not delete the files"
        time.sleep(0.2)
    for file_id in files[:2]:
        assert stored_bytes(short_server, file_id) is None  # gone from the store, not only the row
    assert httpx.get(f"{short_server.v1}/files/{files[2]}", headers=auth(key)).status_code == 200

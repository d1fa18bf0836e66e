"""The official openai SDK runs the whole batch flow unchanged."""

from __future__ import annotations

import time
from typing import Iterator

import openai
import orjson
import pytest

from tests.batches.conftest import jsonl, request_line, wait_in_flight
from tests.harness import Server, Upstream


@pytest.fixture()
def client(batch_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=batch_server.v1, api_key=batch_server.create_key(), max_retries=0,
                       timeout=30) as sdk:
        yield sdk


def test_sdk_whole_flow(client: openai.OpenAI) -> None:
    lines = [request_line(f"req-{i}", content=f"question number {i}") for i in range(5)]
    uploaded = client.files.create(file=("questions.jsonl", jsonl(lines)), purpose="batch")
    assert uploaded.object == "file" and uploaded.purpose == "batch" and uploaded.filename == "questions.jsonl"
    assert uploaded.bytes == len(jsonl(lines))
    assert client.files.retrieve(uploaded.id).id == uploaded.id

    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"job": "nightly"})
    assert batch.status == "in_progress"
    assert batch.metadata == {"job": "nightly"}
    assert batch.expires_at - batch.created_at == 600

    deadline = time.monotonic() + 60
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed"
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (5, 5, 0)
    assert batch.error_file_id is None and batch.output_file_id is not None

    listed = client.batches.list(limit=10)
    assert batch.id in [b.id for b in listed.data]

    output = [orjson.loads(line) for line in client.files.content(batch.output_file_id).content.splitlines()]
    assert sorted(line["custom_id"] for line in output) == [f"req-{i}" for i in range(5)]
    for line in output:
        assert line["error"] is None
        assert line["id"].startswith("batch_req_")
        assert line["response"]["status_code"] == 200
        assert line["response"]["request_id"]
        assert line["response"]["body"]["choices"][0]["message"]["content"]
        assert line["response"]["body"]["model"] == "mock-chat"

    with pytest.raises(openai.BadRequestError):
        client.batches.cancel(batch.id)  # a completed batch cannot be cancelled


def test_sdk_cancel(client: openai.OpenAI, upstream: Upstream) -> None:
    lines = [request_line(f"slow-{i}", model="mock-slow", content=f"sdk-cancel {i}") for i in range(20)]
    uploaded = client.files.create(file=("slow.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    wait_in_flight(upstream, "sdk-cancel")  # the worker has claimed it and lines are in flight
    cancelled = client.batches.cancel(batch.id)
    assert cancelled.status == "cancelling"
    deadline = time.monotonic() + 30
    while cancelled.status == "cancelling":
        assert time.monotonic() < deadline
        time.sleep(0.2)
        cancelled = client.batches.retrieve(batch.id)
    assert cancelled.status == "cancelled"
    assert cancelled.request_counts is not None and cancelled.request_counts.total == 20
    assert cancelled.request_counts.failed == 0
    assert 1 <= cancelled.request_counts.completed < 20

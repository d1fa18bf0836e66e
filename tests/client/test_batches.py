"""The batch helpers of inferd_client against the real server and its batch worker."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferd_client import (AsyncClient, Batch, BatchPage, Client, FileObject, NotFoundError, RetryPolicy,
                           WaitTimeout)
from inferd_client._config import poll_intervals
from tests.harness import Server


def line(custom_id: str, model: str = "mock-chat", **body: Any) -> dict[str, Any]:
    """One JSONL request line."""
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"hello {custom_id}"}], **body}}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in lines)


def parse(content: bytes) -> list[dict[str, Any]]:
    return [json.loads(row) for row in content.splitlines() if row.strip()]


def fast_wait(client: Client, batch_id: str, **options: Any) -> Batch:
    return client.wait_batch(batch_id, poll_interval=0.05, max_interval=0.2, timeout=60, **options)


def test_whole_flow(batch_client: Client, client_server: Server, batch_key: str, tmp_path: Path) -> None:
    source = tmp_path / "requests.jsonl"
    source.write_bytes(jsonl([line("a"), line("b", max_tokens=3), line("bad", model="mock-err400")]))
    uploaded = batch_client.create_file(source)
    assert isinstance(uploaded, FileObject)
    assert (uploaded.filename, uploaded.bytes, uploaded.purpose) == ("requests.jsonl", source.stat().st_size, "batch")
    assert batch_client.get_file(uploaded.id).id == uploaded.id
    assert batch_client.get_file_content(uploaded.id) == source.read_bytes()

    created = batch_client.create_batch(uploaded.id, metadata={"run": "client-test"})
    assert created.status == "in_progress" and created.metadata == {"run": "client-test"}
    assert created.endpoint == "/v1/chat/completions" and created.completion_window == "24h"
    assert created.expires_at is not None and created.expires_at > created.created_at

    seen: list[Batch] = []
    done = fast_wait(batch_client, created.id, on_progress=seen.append)
    assert done.status == "completed" and not done.is_live
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (3, 2, 1)
    assert seen[-1].status == "completed" and all(s.is_live for s in seen[:-1])
    assert done.output_file_id and done.error_file_id

    outputs = parse(batch_client.get_file_content(done.output_file_id))
    assert sorted(o["custom_id"] for o in outputs) == ["a", "b"]
    by_id = {o["custom_id"]: o for o in outputs}
    assert by_id["b"]["response"]["status_code"] == 200 and by_id["b"]["error"] is None
    assert by_id["b"]["response"]["body"]["usage"]["completion_tokens"] == 3
    errors = parse(batch_client.get_file_content(done.error_file_id))
    assert [e["custom_id"] for e in errors] == ["bad"] and errors[0]["error"]
    rows = [r for r in client_server.usage_rows(batch_key) if r["workspace"] == "batch"]
    assert len(rows) >= 2

    deleted = batch_client.delete_file(done.output_file_id)
    assert deleted.deleted and deleted.id == done.output_file_id
    with pytest.raises(NotFoundError):
        batch_client.get_file_content(done.output_file_id)


def test_list_batches_pages_with_after_until_an_empty_page(client_server: Server, batch_key: str) -> None:
    urls: list[str] = []
    http = httpx.Client(timeout=30, event_hooks={"request": [lambda r: urls.append(str(r.url))]})
    with http, Client(client_server.base_url, batch_key, http_client=http) as client:
        file_id = client.create_file(("five.jsonl", jsonl([line("x")]))).id
        made = [client.create_batch(file_id).id for _ in range(5)]
        urls.clear()
        listed = [b.id for b in client.list_batches(limit=2)]
        pages = list(urls)
        page = client.list_batches_page(limit=2)
    assert listed == made[::-1]  # newest first, every one exactly once
    assert isinstance(page, BatchPage) and [b.id for b in page.data] == made[:2:-1][:2]
    assert page.first_id == made[-1] and page.has_more is True
    assert len(pages) == 4  # pages of 2, 2, 1, then the empty page that ends the listing
    assert pages[0].endswith("/v1/batches?limit=2") and pages[1].endswith(f"after={made[3]}")
    assert pages[-1].endswith(f"after={made[0]}")


def test_cancel_with_lines_in_flight(batch_client: Client) -> None:
    file_id = batch_client.create_file(("slow.jsonl", jsonl([line(f"s{i}", model="mock-slow") for i in range(12)]))).id
    created = batch_client.create_batch(file_id)
    with pytest.raises(WaitTimeout) as waited:  # 12 lines of 2 s, 4 at a time: still running after 0.5 s
        batch_client.wait_batch(created.id, poll_interval=0.05, max_interval=0.05, timeout=0.5)
    assert waited.value.batch.is_live
    running = batch_client.get_batch(created.id)
    for _ in range(100):  # until the worker has read the file and lines are running
        if running.request_counts.total:
            break
        time.sleep(0.05)
        running = batch_client.get_batch(created.id)
    assert running.request_counts.total == 12
    cancelled = batch_client.cancel_batch(created.id)
    assert cancelled.status == "cancelling"  # lines are in flight: they drain
    final = fast_wait(batch_client, created.id)
    assert final.status == "cancelled" and final.request_counts.total == 12
    assert final.request_counts.failed == 0  # cancelled lines count in total only
    assert 0 < final.request_counts.completed < 12  # the lines in flight finished; the rest never ran


def test_rejected_file_fails_the_batch(batch_client: Client) -> None:
    file_id = batch_client.create_file(("broken.jsonl", b'{"custom_id": "a", "method": "POST"\nnot json\n')).id
    final = fast_wait(batch_client, batch_client.create_batch(file_id).id)
    assert final.status == "failed" and final.errors and final.output_file_id is None


def test_server_side_refusals(batch_client: Client) -> None:
    with pytest.raises(NotFoundError):
        batch_client.create_batch("file-does-not-exist")
    with pytest.raises(NotFoundError):
        batch_client.get_batch("batch_missing")
    with pytest.raises(NotFoundError):
        batch_client.cancel_batch("batch_missing")


def test_wait_schedule_doubles_from_5_to_30_seconds(batch_client: Client, client_server: Server,
                                                    batch_key: str) -> None:
    schedule = poll_intervals(5.0, 30.0)
    assert [next(schedule) for _ in range(6)] == [5.0, 10.0, 20.0, 30.0, 30.0, 30.0]
    file_id = batch_client.create_file(("slow.jsonl", jsonl([line("s", model="mock-slow")]))).id
    batch_id = batch_client.create_batch(file_id).id
    waits: list[float] = []

    def fake_sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(0.1)  # real time passes so the batch can finish

    done = batch_client.wait_batch(batch_id, sleep=fake_sleep)
    assert done.status == "completed"
    assert len(waits) >= 4  # the slow line takes 2 s; each fake wait lets 0.1 s pass
    assert waits[:4] == [5.0, 10.0, 20.0, 30.0] and set(waits[3:]) == {30.0}


def test_async_batch_flow(client_server: Server, batch_key: str, tmp_path: Path) -> None:
    source = tmp_path / "a.jsonl"
    source.write_bytes(jsonl([line("one"), line("two")]))

    async def go() -> tuple[Batch, list[str], bytes]:
        async with AsyncClient(client_server.base_url, batch_key, retry=RetryPolicy()) as client:
            uploaded = await client.create_file(source)  # a path: opened while sending, then closed
            assert uploaded.bytes == source.stat().st_size and uploaded.filename == "a.jsonl"
            created = await client.create_batch(uploaded.id)
            done = await client.wait_batch(created.id, poll_interval=0.05, max_interval=0.2, timeout=60)
            listed = [b.id async for b in client.list_batches(limit=100)]
            assert done.output_file_id
            return done, listed, await client.get_file_content(done.output_file_id)

    done, listed, content = asyncio.run(go())
    assert done.status == "completed" and done.request_counts.completed == 2
    assert listed == [done.id]
    assert sorted(o["custom_id"] for o in parse(content)) == ["one", "two"]

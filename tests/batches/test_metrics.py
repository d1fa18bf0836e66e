"""Batch lines in GET /metrics: `inferd_batch_lines_total{status}` and their tokens."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.batches.conftest import batch_usage, create, request_line, serve_batches, wait_for
from tests.harness import Server, Upstream
from tests.observe.scraping import scrape, value


@pytest.fixture(scope="module")
def batch_server(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Server]:
    """A server of its own: the shared one may still be finishing other tests' lines."""
    yield from serve_batches(tmp_path_factory, upstream, "metrics", 600, 600, batch_worker=True)


def test_batch_lines_are_counted_by_outcome(batch_server: Server) -> None:
    key = batch_server.create_key()
    before = scrape(batch_server)
    lines = [request_line("ok-1"), request_line("ok-2"), request_line("ok-3"),
             request_line("bad-1", model="mock-err400")]
    batch = wait_for(batch_server, key, create(batch_server, key, lines)["id"], ("completed",))
    assert batch["request_counts"] == {"total": 4, "completed": 3, "failed": 1}
    after = scrape(batch_server)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("inferd_batch_lines_total", status="succeeded") == 3
    assert delta("inferd_batch_lines_total", status="failed") == 1
    rows = [r for r in batch_usage(batch_server, key) if r["model"] == "mock-chat"]
    assert delta("inferd_tokens_total", model="mock-chat", type="completion") == \
        sum(r["completion_tokens"] for r in rows) > 0

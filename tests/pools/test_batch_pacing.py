"""`[batches] max_concurrency` is a cap per deployment: whatever the pool's
routing would do, no deployment ever has more than that many lines in flight, and the lines use
every deployment. Two slow fakes, each its own process, report the most chat requests they
answered at once; the routings are those that would pile lines onto one deployment if the cap
were only per model (max_concurrency times the deployments): a 3:1 weight under least-busy, and
one affinity key for every line."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Iterator

import httpx
import pytest

from tests.batches.conftest import batch_usage, create, wait_for
from tests.harness import Server, Upstream, own_backend, pg_drop_database

MAX_CONCURRENCY = 2
LINES = 16
SLEEP_S = 0.3  # each line's engine call: long enough that lines overlap

PACING_TOML = """
[batches]
max_concurrency = {max_concurrency}

[[models]]
id = "weighted"
upstream_model = "mock-sleep-{sleep}"
timeout_s = 10
[[models.deployments]]
name = "weighted-heavy"
base_url = "{heavy}/v1"
weight = 3
[[models.deployments]]
name = "weighted-light"
base_url = "{light}/v1"

[[models]]
id = "sticky-lines"
routing = "affinity"
upstream_model = "mock-sleep-{sleep}"
timeout_s = 10
[[models.deployments]]
name = "sticky-lines-1"
base_url = "{heavy}/v1"
[[models.deployments]]
name = "sticky-lines-2"
base_url = "{light}/v1"
"""


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, Upstream]]:
    """Two fake upstreams of their own, so their in-flight peaks are this module's alone."""
    started = {name: Upstream.start() for name in ("heavy", "light")}
    yield started
    for upstream in started.values():
        upstream.stop()


@pytest.fixture(scope="module")
def pacing_server(tmp_path_factory: pytest.TempPathFactory, fakes: dict[str, Upstream]) -> Iterator[Server]:
    """`inferd serve` with its batch worker, on a database of its own: no other server's worker (whose
    `max_concurrency` is the default 8) may claim these batches."""
    folder = tmp_path_factory.mktemp("pacing")
    config = folder / "inferd.toml"
    config.write_text(PACING_TOML.format(max_concurrency=MAX_CONCURRENCY, sleep=SLEEP_S,
                                         **{name: fake.url for name, fake in fakes.items()}), encoding="utf-8")
    backend, pg_name = own_backend(folder, "pacing")
    (folder / "data").mkdir()
    server = Server.start(folder / "data", backend, config, batch_worker=True)
    try:
        yield server
    finally:
        server.stop()
        if pg_name:
            pg_drop_database(os.environ["INFERD_DATABASE_URL"], pg_name)


def peak_in_flight(fake: Upstream) -> int:
    """The most chat requests the fake answered at once since its last reset."""
    return int(httpx.get(fake.url + "/_in_flight", timeout=10).json()["peak"])


@pytest.mark.parametrize(("model", "names", "body"), [
    ("weighted", ("weighted-heavy", "weighted-light"), {}),
    ("sticky-lines", ("sticky-lines-1", "sticky-lines-2"), {"user": "one-user-for-every-line"}),
])
def test_no_deployment_gets_more_than_max_concurrency_lines(pacing_server: Server, fakes: dict[str, Upstream],
                                                            model: str, names: tuple[str, str],
                                                            body: dict[str, Any]) -> None:
    for fake in fakes.values():
        httpx.post(fake.url + "/_reset", timeout=10).raise_for_status()
    key = pacing_server.create_key()
    lines = [{"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": model, "messages": [{"role": "user", "content": f"line {n}"}], **body}}
             for n in range(LINES)]
    batch = wait_for(pacing_server, key, create(pacing_server, key, lines)["id"], ("completed",), timeout=90)
    assert batch["request_counts"] == {"total": LINES, "completed": LINES, "failed": 0}
    peaks = {name: peak_in_flight(fakes[fake]) for name, fake in zip(names, ("heavy", "light"))}
    # Never over the cap on either deployment, and both at it: the cap is per deployment, not less.
    assert peaks == {name: MAX_CONCURRENCY for name in names}, peaks
    used = Counter(row["deployment"] for row in batch_usage(pacing_server, key))
    assert set(used) == set(names) and sum(used.values()) == LINES, used
    assert all(row["status_code"] == 200 for row in batch_usage(pacing_server, key))

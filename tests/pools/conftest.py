"""A server whose catalogue pools several fake upstreams, each its own process on its own port."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.harness import Backend, Server, Upstream, free_port, write_chatml_tokenizer

POOLS_TOML = """
[[models]]
id = "pool"
upstream_model = "mock"
cooldown_s = 0.5
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}
[[models.deployments]]
name = "pool-a"
base_url = "{a}/v1"
[[models.deployments]]
name = "pool-b"
base_url = "{b}/v1"
[[models.deployments]]
name = "pool-c"
base_url = "{c}/v1"

[[models]]
id = "rr"
routing = "round-robin"
upstream_model = "mock"
[[models.deployments]]
name = "rr-a"
base_url = "{a}/v1"
weight = 2
[[models.deployments]]
name = "rr-b"
base_url = "{b}/v1"

[[models]]
id = "sticky"
routing = "affinity"
upstream_model = "mock"
cooldown_s = 30
[[models.deployments]]
name = "sticky-1"
base_url = "{k1}/v1"
[[models.deployments]]
name = "sticky-2"
base_url = "{k2}/v1"
[[models.deployments]]
name = "sticky-3"
base_url = "{k3}/v1"

[[models]]
id = "doomed"
upstream_model = "mock"
fallbacks = ["off-limits", "pool"]
cost = {{ input_per_m_token = 50.0, output_per_m_token = 50.0 }}
[[models.deployments]]
name = "doomed-x"
base_url = "http://127.0.0.1:{dead1}/v1"
[[models.deployments]]
name = "doomed-y"
base_url = "{a}/v1"
upstream_model = "mock-error-503"

[[models]]
id = "off-limits"
upstream_model = "mock"
base_url = "{a}/v1"

[[models]]
id = "picky"
[[models.deployments]]
name = "picky-a"
base_url = "{a}/v1"
upstream_model = "mock-error-400"
[[models.deployments]]
name = "picky-b"
base_url = "{b}/v1"
upstream_model = "mock"

[[models]]
id = "throttled"
[[models.deployments]]
name = "throttled-a"
base_url = "{a}/v1"
upstream_model = "mock-error-429"
[[models.deployments]]
name = "throttled-b"
base_url = "{b}/v1"
upstream_model = "mock"

[[models]]
id = "tight"
upstream_model = "mock-sleep-1.5"
base_url = "{a}/v1"
max_in_flight = 1
queue_timeout_s = 0.3

[[models]]
id = "queued"
upstream_model = "mock-sleep-0.4"
base_url = "{a}/v1"
max_in_flight = 1
queue_timeout_s = 10

[[models]]
id = "fifo"
upstream_model = "mock-sleep-0.5"
base_url = "{c}/v1"
max_in_flight = 1
queue_timeout_s = 30

[[models]]
id = "fleet"
upstream_model = "mock"
cooldown_s = 1
health_path = "/health"
health_interval_s = 0.3
[[models.deployments]]
name = "fleet-1"
base_url = "{k1}/v1"
[[models.deployments]]
name = "fleet-2"
base_url = "{k2}/v1"
[[models.deployments]]
name = "fleet-3"
base_url = "{k3}/v1"

[[models]]
id = "embed-pool"
type = "embeddings"
upstream_model = "mock-embed"
[[models.deployments]]
name = "embed-dead"
base_url = "http://127.0.0.1:{dead2}/v1"
[[models.deployments]]
name = "embed-live"
base_url = "{b}/v1"

[[models]]
id = "stt-pool"
type = "asr"
upstream_model = "mock-stt"
[[models.deployments]]
name = "stt-dead"
base_url = "http://127.0.0.1:{dead3}/v1"
[[models.deployments]]
name = "stt-live"
base_url = "{c}/v1"
"""


class Fleet:
    """The upstreams behind the pools: a, b, c shared; k1, k2, k3 for the kill tests."""

    def __init__(self) -> None:
        self.upstreams = {name: Upstream.start() for name in ("a", "b", "c", "k1", "k2", "k3")}

    def url(self, name: str) -> str:
        """The base URL of one upstream."""
        return self.upstreams[name].url

    def kill(self, name: str) -> None:
        """SIGKILL one upstream (its port stays its own for `restart`)."""
        self.upstreams[name].stop()

    def restart(self, name: str) -> None:
        """Start a killed upstream again on its old port."""
        self.upstreams[name] = Upstream.start(self.upstreams[name].port)

    def reset(self, name: str) -> None:
        """Forget what one upstream received (it keeps only its last 200 chat requests anyway)."""
        httpx.post(self.upstreams[name].url + "/_reset", timeout=10).raise_for_status()

    def chat_calls(self, name: str) -> int:
        """Chat requests one upstream received (since its last start)."""
        return sum(1 for r in self.upstreams[name].requests() if r["path"] == "/v1/chat/completions")

    def stop(self) -> None:
        """Stop them all."""
        for upstream in self.upstreams.values():
            if upstream.process.poll() is None:
                upstream.stop()


@pytest.fixture(scope="package")
def fleet() -> Iterator[Fleet]:
    fleet = Fleet()
    yield fleet
    fleet.stop()


@pytest.fixture(scope="package")
def pool_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, fleet: Fleet) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("pools")
    write_chatml_tokenizer(folder / "chatml-tokenizer")
    config = folder / "inferd.toml"
    config.write_text(POOLS_TOML.format(**{name: fleet.url(name) for name in fleet.upstreams},
                                        dead1=free_port(), dead2=free_port(), dead3=free_port()), encoding="utf-8")
    server = Server.start(folder, backend, config, batch_worker=True)
    try:
        yield server
    finally:
        server.stop()

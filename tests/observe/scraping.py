"""Reading GET /metrics in tests."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import Server

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(server: Server) -> Samples:
    """GET /metrics parsed: (sample name, sorted labels) -> value."""
    response = httpx.get(server.base_url + "/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when the series has no such child yet)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)

"""A configured model's alias wins over a built-in model's default alias (docs/configuration.md,
The built-in catalogue): the server starts, the alias routes to the configured model, and the start logs a
warning naming the alias the built-in model lost."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import pytest

from tests.harness import Backend, Server, Upstream, auth, serving

ALIAS_TOML = """
[[models]]
id = "all-minilm-l6-v2"
builtin = true

[[models]]
id = "mock-embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock-embedder"
aliases = ["embed"]

[[models]]
id = "first-image"
type = "image-gen"
base_url = "{upstream}/v1"
upstream_model = "mock-first-image"

[[models]]
id = "second-image"
type = "image-gen"
base_url = "{upstream}/v1"
upstream_model = "mock"
"""


@pytest.fixture(scope="module")
def alias_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """The built-in embedder kept beside a configured embedder that takes its default alias `embed`."""
    with serving(tmp_path_factory.mktemp("aliases"), backend, upstream, ALIAS_TOML) as srv:
        yield srv


def embeddings_requests(upstream: Upstream) -> list[dict[str, Any]]:
    return [r["body"] for r in upstream.requests() if r["path"] == "/v1/embeddings"]


def test_configured_alias_routes_to_the_configured_model(alias_server: Server, upstream: Upstream) -> None:
    log = alias_server.log()
    assert "built-in model 'all-minilm-l6-v2' loses its default alias 'embed'" in log, log
    assert "'mock-embed'" in log
    key = alias_server.create_key()
    listing = httpx.get(alias_server.v1 + "/models", headers=auth(key))
    assert listing.status_code == 200, listing.text
    aliases = {m["id"]: m["aliases"] for m in listing.json()["data"]}
    assert aliases == {"all-minilm-l6-v2": [], "mock-embed": ["embed"], "first-image": ["t2i"], "second-image": []}

    before = len(embeddings_requests(upstream))
    by_alias = httpx.post(alias_server.v1 + "/embeddings", headers=auth(key),
                          json={"model": "embed", "input": "which model answers"}, timeout=60)
    assert by_alias.status_code == 200, by_alias.text
    assert by_alias.json()["model"] == "mock-embed"
    sent = embeddings_requests(upstream)[before:]
    assert [body["model"] for body in sent] == ["mock-embedder"]

    # The built-in model still answers by its id, in-process (the fake upstream sees nothing).
    builtin = httpx.post(alias_server.v1 + "/embeddings", headers=auth(key),
                         json={"model": "all-minilm-l6-v2", "input": "which model answers"}, timeout=120)
    assert builtin.status_code == 200, builtin.text
    assert builtin.json()["model"] == "all-minilm-l6-v2" and len(builtin.json()["data"][0]["embedding"]) == 384
    assert len(embeddings_requests(upstream)) == before + 1


def test_t2i_names_the_first_image_model(alias_server: Server, upstream: Upstream) -> None:
    """The spec: "alias `t2i` resolves to the image model"; with several, the first in the file."""
    key = alias_server.create_key()
    reply = httpx.post(alias_server.v1 + "/images/generations", headers=auth(key), timeout=30,
                       json={"model": "t2i", "prompt": "a red square", "size": "8x8"})
    assert reply.status_code == 200, reply.text
    sent = [r["body"] for r in upstream.requests() if r["path"] == "/v1/images/generations"]
    assert sent[-1]["model"] == "mock-first-image"
    assert alias_server.usage_rows(key)[0]["model"] == "first-image"

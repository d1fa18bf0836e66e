"""GET /metrics: every series of docs/operations.md (Metrics), checked against the calls made."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import Backend, Server, Upstream, auth, serving
from tests.observe.conftest import OBSERVE_TOML
from tests.observe.scraping import scrape, value

CHAT = "/v1/chat/completions"


def chat(server: Server, key: str, model: str = "obs-chat", stream: bool = False, **extra: object) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}], "stream": stream, **extra}
    return httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=body, timeout=30)


def test_metrics_need_no_key_and_speak_prometheus(obs_server: Server) -> None:
    response = httpx.get(obs_server.base_url + "/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    for family in ("inferd_requests_total", "inferd_request_duration_seconds", "inferd_usage_rows_pending",
                   "inferd_usage_commit_seconds", "inferd_deployment_up", "inferd_deployment_in_flight"):
        assert f"# TYPE {family.removesuffix('_total')}" in response.text
    assert httpx.post(obs_server.base_url + "/metrics", timeout=10).status_code == 405


def test_requests_duration_tokens_and_cost_follow_the_calls(obs_server: Server) -> None:
    key = obs_server.create_key()
    before = scrape(obs_server)
    for _ in range(3):
        assert chat(obs_server, key).status_code == 200
    assert chat(obs_server, key, model="no-such-model").status_code == 404
    embedded = httpx.post(obs_server.v1 + "/embeddings", headers=auth(key), timeout=30,
                          json={"model": "obs-embed", "input": ["one", "two"]})
    assert embedded.status_code == 200
    after = scrape(obs_server)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("inferd_requests_total", route=CHAT, model="obs-chat", status="200") == 3
    assert delta("inferd_requests_total", route=CHAT, model="", status="404") == 1
    assert delta("inferd_request_duration_seconds_count", route=CHAT, model="obs-chat") == 3
    assert delta("inferd_request_duration_seconds_sum", route=CHAT, model="obs-chat") > 0
    assert delta("inferd_requests_total", route="/v1/embeddings", model="obs-embed", status="200") == 1

    rows = obs_server.usage_rows(key)
    chat_rows = [r for r in rows if r["model"] == "obs-chat"]
    assert len(chat_rows) == 3
    assert delta("inferd_tokens_total", model="obs-chat", type="prompt") == sum(r["prompt_tokens"] for r in chat_rows)
    assert delta("inferd_tokens_total", model="obs-chat", type="completion") == \
        sum(r["completion_tokens"] for r in chat_rows) > 0
    assert delta("inferd_cost_usd_total", model="obs-chat") == pytest.approx(sum(r["cost_usd"] for r in chat_rows))
    embed_rows = [r for r in rows if r["model"] == "obs-embed"]
    assert delta("inferd_tokens_total", model="obs-embed", type="prompt") == embed_rows[0]["prompt_tokens"] > 0
    # On SQLite the rows wait in the usage journal until the server folds them, milliseconds on.
    deadline = time.monotonic() + 5
    while (value(after, "inferd_usage_rows_pending") or delta("inferd_usage_commit_seconds_count") < 1) \
            and time.monotonic() < deadline:
        time.sleep(0.02)
        after = scrape(obs_server)
    assert delta("inferd_usage_commit_seconds_count") >= 1
    assert value(after, "inferd_usage_rows_pending") == 0


def test_cold_routes_are_labelled_by_their_path_template(obs_server: Server) -> None:
    key = obs_server.create_key()
    before = scrape(obs_server)
    assert httpx.get(obs_server.v1 + "/files/file-nope", headers=auth(key), timeout=10).status_code == 404
    assert httpx.get(obs_server.v1 + "/models", headers=auth(key), timeout=10).status_code == 200
    after = scrape(obs_server)
    route = "/v1/files/{file_id}"
    assert value(after, "inferd_requests_total", route=route, model="", status="404") - \
        value(before, "inferd_requests_total", route=route, model="", status="404") == 1
    assert value(after, "inferd_requests_total", route="/v1/models", model="", status="200") - \
        value(before, "inferd_requests_total", route="/v1/models", model="", status="200") == 1
    assert not any("file-nope" in str(labels) for _, labels in after)


def test_time_to_first_token_and_in_flight_of_streams(obs_server: Server) -> None:
    key = obs_server.create_key()
    before = scrape(obs_server)
    labels = {"model": "obs-drip", "deployment": "obs-drip"}
    seen: list[float] = []

    def stream() -> None:
        with httpx.stream("POST", obs_server.v1 + "/chat/completions", headers=auth(key), timeout=30,
                          json={"model": "obs-drip", "messages": [{"role": "user", "content": "hi"}],
                                "stream": True}) as response:
            assert response.status_code == 200
            for _ in response.iter_lines():
                pass

    threads = [threading.Thread(target=stream) for _ in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not seen:
        during = scrape(obs_server)
        if value(during, "inferd_deployment_in_flight", **labels) == 2:
            seen.append(2)
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    assert seen == [2], "two streams under way were not both counted in flight"
    after = scrape(obs_server)
    assert value(after, "inferd_deployment_in_flight", **labels) == 0
    assert value(after, "inferd_time_to_first_token_seconds_count", **labels) - \
        value(before, "inferd_time_to_first_token_seconds_count", **labels) == 2
    assert value(after, "inferd_requests_total", route=CHAT, model="obs-drip", status="200") - \
        value(before, "inferd_requests_total", route=CHAT, model="obs-drip", status="200") == 2


def test_failures_up_and_fallbacks(obs_server: Server) -> None:
    key = obs_server.create_key()
    before = scrape(obs_server)
    for _ in range(3):
        assert chat(obs_server, key, model="obs-pool").status_code == 200
    assert chat(obs_server, key, model="obs-gone").status_code == 200
    after = scrape(obs_server)
    dead = {"model": "obs-pool", "deployment": "obs-dead"}
    # The dead deployment failed once (connect) and then cools down for a minute: not tried again.
    assert value(after, "inferd_deployment_failures_total", reason="connect", **dead) - \
        value(before, "inferd_deployment_failures_total", reason="connect", **dead) == 1
    assert value(after, "inferd_deployment_failures_total", reason="status_5xx", **dead) == 0
    assert value(after, "inferd_deployment_up", **dead) == 0
    assert value(after, "inferd_deployment_up", model="obs-pool", deployment="obs-live") == 1
    assert value(after, "inferd_deployment_up", model="obs-chat", deployment="obs-chat") == 1
    assert value(after, "inferd_fallbacks_total", model="obs-gone", fallback="obs-chat") - \
        value(before, "inferd_fallbacks_total", model="obs-gone", fallback="obs-chat") == 1
    # The request is labelled with the model that answered.
    assert value(after, "inferd_requests_total", route=CHAT, model="obs-chat", status="200") - \
        value(before, "inferd_requests_total", route=CHAT, model="obs-chat", status="200") == 1


def test_rejections_by_reason(obs_server: Server) -> None:
    before = scrape(obs_server)
    bad = httpx.post(obs_server.v1 + "/chat/completions", headers=auth("nope:nope"), timeout=10,
                     json={"model": "obs-chat", "messages": [{"role": "user", "content": "x"}]})
    assert bad.status_code == 401
    assert httpx.get(obs_server.v1 + "/models", timeout=10).status_code == 401
    limited = obs_server.create_key(rpm=1)
    assert chat(obs_server, limited).status_code == 200
    assert chat(obs_server, limited).status_code == 429
    broke = obs_server.create_key(budget_usd=0)
    assert chat(obs_server, broke).status_code == 402
    key = obs_server.create_key()

    async def crowd() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            calls = [client.post(obs_server.v1 + "/chat/completions", headers=auth(key),
                                 json={"model": "obs-narrow", "messages": [{"role": "user", "content": "x"}],
                                       "stream": True}) for _ in range(3)]
            return [r.status_code for r in await asyncio.gather(*calls)]

    statuses = asyncio.run(crowd())
    assert statuses.count(503) >= 1, statuses
    after = scrape(obs_server)

    def delta(reason: str) -> float:
        return value(after, "inferd_rejections_total", reason=reason) - \
            value(before, "inferd_rejections_total", reason=reason)

    assert delta("authentication") == 2
    assert delta("rate_limit") == 1
    assert delta("budget") == 1
    assert delta("overloaded") == statuses.count(503)


def test_metrics_can_be_turned_off(tmp_path: Path, backend: Backend, upstream: Upstream) -> None:
    with serving(tmp_path, backend, upstream, "[metrics]\nenabled = false\n" + OBSERVE_TOML) as server:
        response = httpx.get(server.base_url + "/metrics", timeout=10)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "unknown_route"
        assert response.headers["x-request-id"]


def test_workers_add_up(tmp_path: Path, backend: Backend, upstream: Upstream) -> None:
    shared = Backend(backend.database_url, backend.redis_url or "redis://127.0.0.1:6379/0",
                     backend.redis_prefix + "workers:")
    with serving(tmp_path, shared, upstream, OBSERVE_TOML, args=("--workers", "2")) as server:
        key = server.create_key()

        async def fire() -> list[int]:
            limits = httpx.Limits(max_connections=20, max_keepalive_connections=0)  # new connections: both workers
            async with httpx.AsyncClient(timeout=30, limits=limits) as client:
                calls = [client.post(server.v1 + "/chat/completions", headers=auth(key),
                                     json={"model": "obs-chat", "messages": [{"role": "user", "content": "x"}]})
                         for _ in range(40)]
                return [r.status_code for r in await asyncio.gather(*calls)]

        assert asyncio.run(fire()) == [200] * 40
        rows = server.usage_rows(key)
        for _ in range(4):  # whichever worker answers the scrape, the figures are the sum of both
            samples = scrape(server)
            assert value(samples, "inferd_requests_total", route=CHAT, model="obs-chat", status="200") == 40
            assert value(samples, "inferd_tokens_total", model="obs-chat", type="completion") == \
                sum(r["completion_tokens"] for r in rows)

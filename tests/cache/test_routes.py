"""The response cache on the running server, over the fake upstream (which counts every request it
gets, so a hit is proven to reach no engine): scope (two keys of one org, two orgs), the fields that
keep or change the key, the books (usage rows, the summary, the metrics), Cache-Control, the ttl and
`max_entries`, failures never stored, streams, the Messages and Responses dialects answered from an
entry stored through chat, embeddings and rerank, `DELETE /v1/admin/cache`, and rpm."""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any, Iterator

import httpx
import orjson
import pytest

from tests.admin.conftest import cli
from tests.harness import Backend, Server, Upstream, auth, own_backend, pg_drop_database, serving

TOML = """
[cache]
enabled = true

[[models]]
id = "cached"
base_url = "{upstream}/v1"
upstream_model = "mock"
aliases = ["cached-alias"]
capabilities = ["tools", "response_format"]
tokenizer = "upstream"
cost = {{ input_per_m_token = 1000.0, output_per_m_token = 2000.0 }}

[[models]]
id = "echo"
base_url = "{upstream}/v1"
upstream_model = "mock-echo"
tokenizer = "upstream"

[[models]]
id = "uncached"
base_url = "{upstream}/v1"
upstream_model = "mock"
cache = false

[[models]]
id = "broken"
base_url = "{upstream}/v1"
upstream_model = "mock-error-500"

[[models]]
id = "dropping"
base_url = "{upstream}/v1"
upstream_model = "mock-drop-after-2"

[[models]]
id = "dripping"
base_url = "{upstream}/v1"
upstream_model = "mock-drip-0.3"

[[models]]
id = "embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[models]]
id = "ranker"
type = "reranker"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[guardrails]]
name = "no-secret"
kind = "deny"
direction = "output"
action = "block"
patterns = ["secret"]
applies_to = ["c-guarded"]

[[guardrails]]
name = "deny-in"
kind = "deny"
direction = "input"
action = "block"
patterns = ["forbidden"]

[[guardrails]]
name = "mask-out"
kind = "deny"
direction = "output"
action = "redact"
patterns = ["zebra"]
"""

SMALL_TOML = """
[cache]
enabled = true
ttl_s = 1
max_entries = 2

[[models]]
id = "cached"
base_url = "{upstream}/v1"
upstream_model = "mock"
"""


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("cache"), backend, upstream, TOML) as srv:
        yield srv


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Server]:
    """A server of its own database and Redis prefix: `max_entries` counts every entry there."""
    folder = tmp_path_factory.mktemp("cache-small")
    own, name = own_backend(folder, "cache_small")
    try:
        with serving(folder, own, upstream, SMALL_TOML) as srv:
            yield srv
    finally:
        if name is not None:
            pg_drop_database(os.environ["INFERD_DATABASE_URL"], name)


def chats(upstream: Upstream) -> int:
    """Chat requests the upstream has received so far (its own count: the log it keeps holds only
    the last 200 requests, which the whole suite passes)."""
    return int(httpx.get(upstream.url + "/_in_flight", timeout=10).json()["received"])


def question() -> str:
    return f"What is the capital of place {uuid.uuid4().hex[:8]}?"


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "cached", "temperature": 0, "messages": [{"role": "user", "content": text}], **extra}


def post(server: Server, key: str, payload: dict[str, Any], path: str = "/chat/completions",
         headers: dict[str, str] | None = None) -> httpx.Response:
    response = httpx.post(server.v1 + path, headers={**auth(key), **(headers or {})}, json=payload, timeout=30)
    return response


def events(response: httpx.Response) -> list[Any]:
    """The data of an SSE body's events, `[DONE]` as the string."""
    out: list[Any] = []
    for block in response.text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append("[DONE]" if line == "data: [DONE]" else orjson.loads(line[6:]))
    return out


def streamed_content(response: httpx.Response) -> str:
    return "".join((choice.get("delta") or {}).get("content") or "" for chunk in events(response)
                   if isinstance(chunk, dict) for choice in chunk.get("choices") or ())


def test_a_hit_reaches_no_engine_and_is_billed_as_a_hit(cached: Server, upstream: Upstream) -> None:
    key = cached.create_key()
    text = question()
    first = post(cached, key, body(text))
    assert first.status_code == 200, first.text
    assert first.headers["x-inferd-cache"] == "miss" and "age" not in first.headers
    before = chats(upstream)
    # Another order of fields, another user and metadata, and the model by its alias: the same entry.
    again = post(cached, key, {"metadata": {"run": "2"}, "user": "someone", "temperature": 0,
                               "messages": [{"role": "user", "content": text}], "model": "cached-alias"})
    assert again.status_code == 200, again.text
    assert again.headers["x-inferd-cache"] == "hit" and int(again.headers["age"]) >= 0
    assert again.json()["choices"] == first.json()["choices"] and again.json()["usage"] == first.json()["usage"]
    assert chats(upstream) == before
    rows = cached.usage_rows(key)
    assert len(rows) == 2
    miss, hit = rows
    assert not miss["cache_hit"] and miss["cost_usd"] > 0 and miss["deployment"] == "cached"
    assert hit["cache_hit"] and hit["deployment"] == "cache" and hit["cost_usd"] == 0
    assert (hit["prompt_tokens"], hit["completion_tokens"]) == (miss["prompt_tokens"], miss["completion_tokens"])
    assert hit["saved_usd"] == pytest.approx(miss["cost_usd"])
    assert hit["metadata"] == '{"run":"2"}'
    assert cached.spend(key) == pytest.approx(miss["cost_usd"])  # the hit spent nothing
    summary = httpx.get(cached.v1 + "/usage/summary", params={"group_by": "model"}, headers=auth(key), timeout=30)
    assert summary.status_code == 200, summary.text
    (total,) = summary.json()["data"]
    assert total["requests"] == 2 and total["cache_hits"] == 1
    assert total["saved_usd"] == pytest.approx(miss["cost_usd"]) and total["cost_usd"] == pytest.approx(miss["cost_usd"])
    assert total["prompt_tokens"] == 2 * miss["prompt_tokens"]
    usage_page = httpx.get(cached.v1 + "/usage", headers=auth(key), timeout=30).json()["data"]
    assert sorted(row["cache_hit"] for row in usage_page) == [False, True]


def test_metrics_count_hits_misses_and_savings(cached: Server) -> None:
    def counts() -> tuple[float, float, float]:
        text = httpx.get(cached.base_url + "/metrics", timeout=30).text

        def value(pattern: str) -> float:
            found = re.search(pattern + r" ([0-9.e+-]+)", text)
            return float(found.group(1)) if found else 0.0
        return (value(r'inferd_cache_requests_total\{model="cached",result="hit"\}'),
                value(r'inferd_cache_requests_total\{model="cached",result="miss"\}'),
                value(r'inferd_cache_saved_usd_total\{model="cached"\}'))

    key = cached.create_key()
    hits, misses, saved = counts()
    text = question()
    post(cached, key, body(text))
    post(cached, key, body(text))
    post(cached, key, body(text))
    rows = cached.usage_rows(key)
    after = counts()
    assert after[0] == hits + 2 and after[1] == misses + 1
    assert after[2] == pytest.approx(saved + 2 * rows[0]["cost_usd"])


def test_no_tenant_is_answered_from_another_tenants_entry(cached: Server, upstream: Upstream) -> None:
    org = f"c-{uuid.uuid4().hex[:8]}"
    owner, same_org = cached.create_key(org=org), cached.create_key(org=org)
    other_org = cached.create_key()
    text = question()
    assert post(cached, owner, body(text)).headers["x-inferd-cache"] == "miss"
    before = chats(upstream)
    assert post(cached, same_org, body(text)).headers["x-inferd-cache"] == "miss"
    assert post(cached, other_org, body(text)).headers["x-inferd-cache"] == "miss"
    assert chats(upstream) == before + 2
    for path, payload in (("/embeddings", {"model": "embed", "input": text}),
                          ("/rerank", {"model": "ranker", "query": text, "documents": ["a", "b"]})):
        assert post(cached, owner, payload, path).headers["x-inferd-cache"] == "miss"
        assert post(cached, owner, payload, path).headers["x-inferd-cache"] == "hit"
        assert post(cached, same_org, payload, path).headers["x-inferd-cache"] == "miss"
        assert post(cached, other_org, payload, path).headers["x-inferd-cache"] == "miss"


@pytest.mark.parametrize("change", [
    {"max_tokens": 3}, {"seed": 7}, {"stop": ["Paris"]}, {"top_p": 0.5}, {"response_format": {"type": "json_object"}},
    {"messages": [{"role": "system", "content": "Be brief."}]},
])
def test_a_field_that_can_change_the_output_misses(cached: Server, change: dict[str, Any]) -> None:
    key = cached.create_key()
    text = question()
    assert post(cached, key, body(text)).headers["x-inferd-cache"] == "miss"
    changed = body(text)
    if "messages" in change:
        changed["messages"] = change["messages"] + changed["messages"]
    else:
        changed.update(change)
    assert post(cached, key, changed).headers["x-inferd-cache"] == "miss"
    assert post(cached, key, changed).headers["x-inferd-cache"] == "hit"


def test_what_is_not_determined_or_not_cached_is_bypassed(cached: Server, upstream: Upstream) -> None:
    key = cached.create_key()
    text = question()
    for payload in ({"model": "cached", "messages": [{"role": "user", "content": text}]},  # no temperature 0
                    {"model": "cached", "temperature": 0.7, "messages": [{"role": "user", "content": text}]},
                    {**body(text), "model": "uncached"}):
        before = chats(upstream)
        for _ in range(2):
            answer = post(cached, key, payload)
            assert answer.status_code == 200 and answer.headers["x-inferd-cache"] == "bypass"
        assert chats(upstream) == before + 2
    # A seed determines the output as temperature 0 does.
    seeded = {"model": "cached", "seed": 3, "temperature": 0.7, "messages": [{"role": "user", "content": text}]}
    assert post(cached, key, seeded).headers["x-inferd-cache"] == "miss"
    assert post(cached, key, seeded).headers["x-inferd-cache"] == "hit"


def test_cache_control(cached: Server, upstream: Upstream) -> None:
    key = cached.create_key()
    text = question()
    # no-store: neither read nor stored.
    assert post(cached, key, body(text), headers={"Cache-Control": "no-store"}).headers["x-inferd-cache"] == "bypass"
    assert post(cached, key, body(text)).headers["x-inferd-cache"] == "miss"
    # no-cache: not read (the engine answers), but stored.
    other = question()
    before = chats(upstream)
    assert post(cached, key, body(other), headers={"Cache-Control": "no-cache"}).headers["x-inferd-cache"] == "miss"
    assert post(cached, key, body(other), headers={"Cache-Control": "no-cache"}).headers["x-inferd-cache"] == "miss"
    assert chats(upstream) == before + 2
    assert post(cached, key, body(other)).headers["x-inferd-cache"] == "hit"
    # max-age: only an entry at most that old.
    time.sleep(1.2)
    assert post(cached, key, body(other), headers={"Cache-Control": "max-age=0"}).headers["x-inferd-cache"] == "miss"
    hit = post(cached, key, body(other), headers={"Cache-Control": "max-age=60"})
    assert hit.headers["x-inferd-cache"] == "hit" and int(hit.headers["age"]) <= 60


def test_ttl_and_max_entries(small: Server, upstream: Upstream) -> None:
    key = small.create_key()
    first, second, third = question(), question(), question()
    assert post(small, key, body(first)).headers["x-inferd-cache"] == "miss"
    assert post(small, key, body(first)).headers["x-inferd-cache"] == "hit"
    time.sleep(1.3)  # ttl_s = 1
    assert post(small, key, body(first)).headers["x-inferd-cache"] == "miss"
    # max_entries = 2: a third entry sends the oldest out.
    for text in (second, third):
        time.sleep(0.05)
        assert post(small, key, body(text)).headers["x-inferd-cache"] == "miss"
    assert post(small, key, body(third)).headers["x-inferd-cache"] == "hit"
    assert post(small, key, body(second)).headers["x-inferd-cache"] == "hit"
    assert post(small, key, body(first)).headers["x-inferd-cache"] == "miss"  # the oldest left


def test_a_failure_is_never_stored(cached: Server, upstream: Upstream) -> None:
    key = cached.create_key()
    text = question()
    for _ in range(2):  # a 5xx
        failed = post(cached, key, {**body(text), "model": "broken"})
        assert failed.status_code >= 500 and failed.headers.get("x-inferd-cache") == "miss"
    for _ in range(2):  # a stream the upstream cuts
        cut = post(cached, key, {**body(text), "model": "dropping", "stream": True})
        assert cut.status_code == 200 and "[DONE]" not in events(cut)
        assert cut.headers["x-inferd-cache"] == "miss"
    guarded = cached.create_key(org="c-guarded")  # a refusal: the reply is withheld (content_filter)
    secret = {**body(f"the secret is {uuid.uuid4().hex[:6]}"), "model": "echo"}
    for stream in (False, True):
        for _ in range(2):
            refused = post(cached, guarded, {**secret, "stream": stream})
            assert refused.status_code == 200 and "content_filter" in refused.text
            assert refused.headers["x-inferd-cache"] == "miss"
    # A client that leaves a stream: nothing stored.
    leaving = {**body(question()), "model": "dripping", "stream": True}
    with httpx.stream("POST", cached.v1 + "/chat/completions", headers=auth(key), json=leaving, timeout=30) as r:
        assert r.headers["x-inferd-cache"] == "miss"
        next(r.iter_raw())
    time.sleep(0.5)
    again = post(cached, key, leaving)
    assert again.headers["x-inferd-cache"] == "miss" and events(again)[-1] == "[DONE]"
    assert post(cached, key, leaving).headers["x-inferd-cache"] == "hit"  # a stream that ended is stored


def test_guardrails_an_org_takes_on_apply_to_what_was_stored_before(cached: Server, upstream: Upstream) -> None:
    """Entries stored before the org chose guardrails are never served past them: an input the new
    input guardrail blocks is refused (chat and embeddings), not answered from the cache, and a reply
    stored without the new output guardrail is asked for again, not served unredacted."""
    org = f"c-opt-{uuid.uuid4().hex[:6]}"
    key = cached.create_key(org=org)
    blocked = body(f"a forbidden question {uuid.uuid4().hex[:6]}")
    echoed = {**body(f"the zebra code {uuid.uuid4().hex[:6]}"), "model": "echo"}
    embedded = {"model": "embed", "input": f"forbidden text {uuid.uuid4().hex[:6]}"}
    for _ in range(2):  # stored, then a hit: the org has no guardrail yet
        assert post(cached, key, blocked).status_code == 200
        first = post(cached, key, echoed)
        assert first.status_code == 200 and "zebra" in first.json()["choices"][0]["message"]["content"]
        assert post(cached, key, embedded, "/embeddings").status_code == 200
    assert post(cached, key, echoed).headers["x-inferd-cache"] == "hit"
    cli(cached, "orgs", "update", org, "--guardrails", "deny-in,mask-out")
    before = chats(upstream)
    for payload, path in ((blocked, "/chat/completions"), (embedded, "/embeddings")):
        refused = post(cached, key, payload, path)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "guardrail_blocked"
    again = post(cached, key, echoed)
    assert again.status_code == 200 and again.headers["x-inferd-cache"] == "miss"
    assert "zebra" not in again.text and chats(upstream) == before + 1
    assert post(cached, key, echoed).headers["x-inferd-cache"] == "hit"  # stored redacted, served so


def test_streams_replay_with_their_framing(cached: Server, upstream: Upstream) -> None:
    key = cached.create_key()
    text = question()
    first = post(cached, key, {**body(text), "stream": True, "stream_options": {"include_usage": True}})
    assert first.headers["x-inferd-cache"] == "miss"
    before = chats(upstream)
    again = post(cached, key, {**body(text), "stream": True})
    assert again.headers["x-inferd-cache"] == "hit" and again.headers["content-type"].startswith("text/event-stream")
    replayed = events(again)
    assert replayed[-1] == "[DONE]"
    assert replayed[-2]["choices"] == [] and replayed[-2]["usage"] == events(first)[-2]["usage"]
    assert streamed_content(again) == streamed_content(first)
    assert [c["choices"][0]["finish_reason"] for c in replayed[:-2]][-1] == "stop"
    # A streamed entry answers a blocking request, and a blocking one a stream.
    blocking = post(cached, key, body(text))
    assert blocking.headers["x-inferd-cache"] == "hit"
    assert blocking.json()["choices"][0]["message"]["content"] == streamed_content(first)
    other = question()
    stored = post(cached, key, body(other)).json()
    streamed = post(cached, key, {**body(other), "stream": True})
    assert streamed.headers["x-inferd-cache"] == "hit"
    assert streamed_content(streamed) == stored["choices"][0]["message"]["content"]
    assert chats(upstream) == before + 1
    rows = cached.usage_rows(key)
    assert [r["cache_hit"] for r in rows] == [False, True, True, False, True]


def test_messages_and_responses_answer_from_a_chat_entry(cached: Server, upstream: Upstream) -> None:
    key = cached.create_key()
    text = question()
    stored = post(cached, key, body(text, max_tokens=200))
    content = stored.json()["choices"][0]["message"]["content"]
    before = chats(upstream)
    anthropic = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    message = {"model": "cached", "temperature": 0, "max_tokens": 200, "messages": [{"role": "user", "content": text}]}
    blocking = httpx.post(cached.v1 + "/messages", headers=anthropic, json=message, timeout=30)
    assert blocking.status_code == 200, blocking.text
    assert blocking.headers["x-inferd-cache"] == "hit"
    assert blocking.json()["type"] == "message" and blocking.json()["content"][0]["text"] == content
    streamed = httpx.post(cached.v1 + "/messages", headers=anthropic, json={**message, "stream": True}, timeout=30)
    assert streamed.headers["x-inferd-cache"] == "hit"
    kinds = [e.get("type") for e in events(streamed) if isinstance(e, dict)]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_delta" in kinds
    assert "".join(e["delta"].get("text", "") for e in events(streamed)
                   if isinstance(e, dict) and e.get("type") == "content_block_delta") == content
    response = {"model": "cached", "temperature": 0, "max_output_tokens": 200, "input": text}
    answered = post(cached, key, response, "/responses")
    assert answered.status_code == 200, answered.text
    assert answered.headers["x-inferd-cache"] == "hit"
    texts = [part.get("text") for item in answered.json()["output"] if item.get("type") == "message"
             for part in item.get("content") or ()]
    assert answered.json()["object"] == "response" and texts == [content]
    streamed = post(cached, key, {**response, "stream": True}, "/responses")
    assert streamed.headers["x-inferd-cache"] == "hit"
    kinds = [e.get("type") for e in events(streamed) if isinstance(e, dict)]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert chats(upstream) == before


def test_admin_empties_its_orgs_entries(cached: Server) -> None:
    org = f"c-{uuid.uuid4().hex[:8]}"
    key, admin = cached.create_key(org=org), cached.create_key(org=org, key_type="admin")
    other = cached.create_key()
    text = question()
    for caller in (key, other):
        post(cached, caller, body(text))
        assert post(cached, caller, body(text)).headers["x-inferd-cache"] == "hit"
    assert httpx.delete(cached.v1 + "/admin/cache", headers=auth(key), timeout=30).status_code == 403
    cleared = httpx.delete(cached.v1 + "/admin/cache", headers=auth(admin), timeout=30)
    assert cleared.status_code == 200 and cleared.json() == {"object": "cache.cleared", "deleted": 1}
    assert post(cached, key, body(text)).headers["x-inferd-cache"] == "miss"
    assert post(cached, other, body(text)).headers["x-inferd-cache"] == "hit"  # another org's entries stay
    audit = httpx.get(cached.v1 + "/admin/audit", headers=auth(admin), timeout=30).json()["data"]
    assert audit[0]["action"] == "cache.clear" and audit[0]["details"] == {"deleted": 1}


def test_a_hit_counts_against_rpm(cached: Server) -> None:
    key = cached.create_key(rpm=2)
    text = question()
    assert post(cached, key, body(text)).headers["x-inferd-cache"] == "miss"
    assert post(cached, key, body(text)).headers["x-inferd-cache"] == "hit"
    assert post(cached, key, body(text)).status_code == 429


def test_replicas_share_entries_through_redis(tmp_path_factory: pytest.TempPathFactory, backend: Backend,
                                              upstream: Upstream, cached: Server) -> None:
    if not backend.redis_url:
        pytest.skip("entries are shared through Redis")
    with serving(tmp_path_factory.mktemp("cache-replica"), backend, upstream, TOML) as replica:
        key = cached.create_key()
        text = question()
        assert post(cached, key, body(text)).headers["x-inferd-cache"] == "miss"
        before = chats(upstream)
        assert post(replica, key, body(text)).headers["x-inferd-cache"] == "hit"
        assert chats(upstream) == before


def test_off_by_default(server: Server, app_key: str) -> None:
    answer = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), timeout=30,
                        json={"model": "mock-chat", "temperature": 0, "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 200 and "x-inferd-cache" not in answer.headers

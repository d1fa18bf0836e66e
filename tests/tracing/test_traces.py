"""Traces of the real server, received by a loopback OTLP/HTTP collector: a server span per
request continuing the client's `traceparent`, a child per engine attempt (two on a failover)
whose `traceparent` the upstream receives, a generate turn's retrieval span, the GenAI
attributes, and no prompt or reply text unless `capture_content` is on."""

from __future__ import annotations

import json
import secrets
import uuid
from typing import Any

import httpx
import orjson

from tests.conversations.conftest import mint_user
from tests.conversations.test_generate import frames_of, generate, upload
from tests.harness import Server, Upstream, auth
from tests.tracing.collector import Collector, Span
from tests.tracing.conftest import GUARDED_ORG


def new_traceparent() -> tuple[str, str, str]:
    """A client's `traceparent`, its trace id and its span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def new_key(server: Server) -> tuple[str, str]:
    """A key of a fresh org, and the org."""
    org = f"org-{uuid.uuid4().hex[:8]}"
    return server.create_key(org=org), org


def chat(server: Server, key: str, body: dict[str, Any], traceparent: str | None = None) -> httpx.Response:
    headers = {**auth(key), **({"traceparent": traceparent} if traceparent else {})}
    if not body.get("stream"):
        return httpx.post(server.v1 + "/chat/completions", headers=headers, json=body, timeout=30)
    with httpx.stream("POST", server.v1 + "/chat/completions", headers=headers, json=body, timeout=30) as reply:
        reply.read()
        return reply


def one(spans: list[Span], kind: str) -> Span:
    found = [s for s in spans if s.kind == kind]
    assert len(found) == 1, [(s.name, s.kind) for s in spans]
    return found[0]


def upstream_traceparents(upstream: Upstream, request_id: str, path: str = "/v1/chat/completions") -> list[str]:
    """The `traceparent` of each request the fake upstream received for one of inferd's requests."""
    return [r["traceparent"] for r in upstream.requests() if r["path"] == path and r.get("request_id") == request_id]


def assert_no_text(spans: list[Span], *texts: str) -> None:
    """None of `texts` in any attribute, event or resource of `spans`."""
    dumped = json.dumps([[s.name, s.attributes, s.events, s.resource, s.status_message] for s in spans])
    for text in texts:
        assert text not in dumped, f"{text!r} found in the spans"


def test_a_chat_is_a_server_span_with_an_attempt_child_in_the_clients_trace(
        traced_server: Server, upstream: Upstream, collector: Collector) -> None:
    key, org = new_key(traced_server)
    header, trace_id, client_span = new_traceparent()
    secret = f"zebra-{secrets.token_hex(4)}"
    reply = chat(traced_server, key, {"model": "tr-echo", "max_tokens": 50, "temperature": 0.5,
                                      "messages": [{"role": "user", "content": f"remember {secret} please"}]},
                 header)
    assert reply.status_code == 200, reply.text
    assert secret in reply.json()["choices"][0]["message"]["content"]  # the reply holds it too
    usage = reply.json()["usage"]
    spans = collector.trace(trace_id, 2)
    assert len(spans) == 2
    server, attempt = one(spans, "server"), one(spans, "client")

    assert server.parent_span_id == client_span and server.trace_id == trace_id
    assert attempt.parent_span_id == server.span_id and attempt.trace_id == trace_id
    assert server.name == "chat tr-echo" and attempt.name == "chat mock-echo"
    assert server.status == "unset" and attempt.status == "unset"
    attributes = server.attributes
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "tr-echo"
    assert attributes["gen_ai.response.model"] == "tr-echo"
    assert attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"] > 0
    assert attributes["gen_ai.request.max_tokens"] == 50
    assert attributes["gen_ai.request.temperature"] == 0.5
    assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes["inferd.deployment"] == "tr-echo"
    assert attributes["inferd.key_id"] == key.split(":")[0]
    assert attributes["inferd.org"] == org
    assert attributes["inferd.cache_hit"] is False
    assert attributes["inferd.request_id"] == reply.headers["x-request-id"]
    assert attributes["http.route"] == "/v1/chat/completions" and attributes["http.response.status_code"] == 200
    assert server.resource["service.name"] == "inferd-test" and server.scope == "inferd"

    attempt_attributes = attempt.attributes
    assert attempt_attributes["gen_ai.operation.name"] == "chat"
    assert attempt_attributes["gen_ai.request.model"] == "mock-echo"
    assert attempt_attributes["inferd.deployment"] == "tr-echo"
    assert attempt_attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert attempt_attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert attempt_attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attempt_attributes["gen_ai.request.max_tokens"] == 50
    assert attempt_attributes["server.address"] == "127.0.0.1" and attempt_attributes["server.port"] == upstream.port

    # The upstream continues the attempt's span.
    assert upstream_traceparents(upstream, reply.headers["x-request-id"]) == [f"00-{trace_id}-{attempt.span_id}-01"]
    assert_no_text(spans, secret, "remember")


def test_a_stream_s_attempt_span_lasts_to_its_end_with_usage_and_finish_reason(
        traced_server: Server, upstream: Upstream, collector: Collector) -> None:
    key, _ = new_key(traced_server)
    header, trace_id, client_span = new_traceparent()
    secret = f"walrus-{secrets.token_hex(4)}"
    reply = chat(traced_server, key, {"model": "tr-echo", "stream": True,
                                      "messages": [{"role": "user", "content": f"echo {secret} now"}]}, header)
    assert reply.status_code == 200
    assert secret in reply.text
    chunks = [orjson.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
    usage = [chunk["usage"] for chunk in chunks if chunk.get("usage")][-1]
    spans = collector.trace(trace_id, 2)
    server, attempt = one(spans, "server"), one(spans, "client")
    assert server.parent_span_id == client_span and attempt.parent_span_id == server.span_id
    for span in (server, attempt):
        assert span.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"] > 0
        assert span.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"] > 0
        assert span.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    # The attempt lasted while the stream was relayed, inside its request's span.
    assert upstream_traceparents(upstream, reply.headers["x-request-id"]) == [f"00-{trace_id}-{attempt.span_id}-01"]
    assert_no_text(spans, secret)


def test_a_failover_shows_one_attempt_span_per_deployment_tried(
        traced_server: Server, upstream: Upstream, collector: Collector) -> None:
    key, _ = new_key(traced_server)
    header, trace_id, _ = new_traceparent()
    reply = chat(traced_server, key, {"model": "tr-pool", "messages": [{"role": "user", "content": "hi"}]}, header)
    assert reply.status_code == 200, reply.text
    spans = collector.trace(trace_id, 3)
    server = one(spans, "server")
    attempts = sorted((s for s in spans if s.kind == "client"), key=lambda s: s.attributes["inferd.deployment"])
    assert [a.attributes["inferd.deployment"] for a in attempts] == ["tr-pool-bad", "tr-pool-good"]
    bad, good = attempts
    assert bad.parent_span_id == good.parent_span_id == server.span_id
    assert bad.status == "error" and bad.attributes["inferd.failover_reason"] == "status_5xx"
    assert bad.attributes["error.type"] and bad.attributes["gen_ai.request.model"] == "mock-error-503"
    assert good.status == "unset" and "error.type" not in good.attributes
    assert server.status == "unset" and server.attributes["inferd.deployment"] == "tr-pool-good"
    # Each attempt's request upstream carried that attempt's span.
    sent = upstream_traceparents(upstream, reply.headers["x-request-id"])
    assert sorted(sent) == sorted(f"00-{trace_id}-{a.span_id}-01" for a in attempts)


def test_a_failed_call_has_error_status_and_an_untraced_client_starts_a_trace(
        traced_server: Server, collector: Collector) -> None:
    key, _ = new_key(traced_server)
    reply = chat(traced_server, key, {"model": "tr-broken", "messages": [{"role": "user", "content": "hi"}]},
                 "00-zzzz-not-a-traceparent-01")
    assert reply.status_code >= 500
    request_id = reply.headers["x-request-id"]
    server = collector.wait_for(lambda spans: [s for s in spans if s.attributes.get("inferd.request_id") == request_id])[0]
    assert server.parent_span_id == "" and len(server.trace_id) == 32  # a trace of its own
    assert server.status == "error" and server.attributes["error.type"] == str(reply.status_code)
    attempt = one(collector.trace(server.trace_id, 2), "client")
    assert attempt.status == "error" and attempt.parent_span_id == server.span_id


def test_embeddings_are_traced_with_their_operation(traced_server: Server, upstream: Upstream,
                                                    collector: Collector) -> None:
    key, _ = new_key(traced_server)
    header, trace_id, client_span = new_traceparent()
    reply = httpx.post(traced_server.v1 + "/embeddings", headers={**auth(key), "traceparent": header},
                       json={"model": "tr-embed", "input": ["the quiet heron"]}, timeout=30)
    assert reply.status_code == 200, reply.text
    spans = collector.trace(trace_id, 2)
    server, attempt = one(spans, "server"), one(spans, "client")
    assert server.name == "embeddings tr-embed" and server.parent_span_id == client_span
    assert server.attributes["gen_ai.operation.name"] == attempt.attributes["gen_ai.operation.name"] == "embeddings"
    assert server.attributes["gen_ai.usage.input_tokens"] == reply.json()["usage"]["prompt_tokens"] > 0
    sent = [r["traceparent"] for r in upstream.requests() if r["path"] == "/v1/embeddings"
            and r.get("traceparent", "") and trace_id in r["traceparent"]]
    assert sent == [f"00-{trace_id}-{attempt.span_id}-01"]
    assert_no_text(spans, "quiet heron")


def test_every_model_route_is_a_server_span_named_for_its_operation(traced_server: Server,
                                                                     collector: Collector) -> None:
    key, _ = new_key(traced_server)
    calls = [  # route, body, extra headers, the server span's name and operation
        ("/messages", {"model": "tr-chat", "max_tokens": 20, "temperature": 0.2,
                       "messages": [{"role": "user", "content": "hi"}]},
         {"anthropic-version": "2023-06-01"}, "chat tr-chat", "chat"),
        ("/responses", {"model": "tr-chat", "input": "hi", "max_output_tokens": 20, "temperature": 0.2}, {},
         "chat tr-chat", "chat"),
        ("/rerank", {"model": "tr-rerank", "query": "heron", "documents": ["a heron", "a bus"]}, {},
         "rerank tr-rerank", "rerank"),
        ("/images/generations", {"model": "tr-image", "prompt": "a red square", "size": "64x32"}, {},
         "image_generation tr-image", "image_generation"),
    ]
    for path, body, extra, name, operation in calls:
        header, trace_id, client_span = new_traceparent()
        reply = httpx.post(traced_server.v1 + path, json=body, timeout=30,
                           headers={**auth(key), **extra, "traceparent": header})
        assert reply.status_code == 200, (path, reply.text)
        spans = collector.trace(trace_id, 2)
        server, attempt = one(spans, "server"), one(spans, "client")
        assert server.name == name and server.parent_span_id == client_span, (path, server.name)
        assert server.attributes["gen_ai.operation.name"] == attempt.attributes["gen_ai.operation.name"] == operation
        assert attempt.parent_span_id == server.span_id
        if "max_tokens" in body or "max_output_tokens" in body:
            assert server.attributes["gen_ai.request.max_tokens"] == attempt.attributes["gen_ai.request.max_tokens"] == 20
            assert server.attributes["gen_ai.request.temperature"] == 0.2
            assert server.attributes["gen_ai.usage.output_tokens"] > 0


def test_a_transcription_s_multipart_upstream_request_carries_the_attempt_s_traceparent(
        traced_server: Server, upstream: Upstream, collector: Collector) -> None:
    key, _ = new_key(traced_server)
    header, trace_id, client_span = new_traceparent()
    reply = httpx.post(traced_server.v1 + "/audio/transcriptions", headers={**auth(key), "traceparent": header},
                       params={"model": "tr-asr"}, files={"file": ("note.wav", b"RIFF1234")}, timeout=30)
    assert reply.status_code == 200, reply.text
    spans = collector.trace(trace_id, 2)
    server, attempt = one(spans, "server"), one(spans, "client")
    assert server.name == "transcription tr-asr" and server.parent_span_id == client_span
    assert attempt.attributes["gen_ai.operation.name"] == "transcription" and attempt.parent_span_id == server.span_id
    sent = [r["traceparent"] for r in upstream.requests() if r["path"] == "/v1/audio/transcriptions"
            and trace_id in (r.get("traceparent") or "")]
    assert sent == [f"00-{trace_id}-{attempt.span_id}-01"]


def test_a_generate_turn_has_a_retrieval_span_parenting_its_embedding_calls(
        traced_server: Server, upstream: Upstream, collector: Collector) -> None:
    user = mint_user(traced_server, f"org-tr-{uuid.uuid4().hex[:8]}")
    cid = user.create()["id"]
    upload(user, cid, "Field notes. The launch code of the Pelican mission is AMBER-7731, kept in the blue safe.",
           "mission.txt")
    question = user.say(cid, "What is the launch code of the Pelican mission?")
    header, trace_id, client_span = new_traceparent()
    response = httpx.post(f"{traced_server.v1}/conversations/{cid}/generate", params={"model": "tr-chat"},
                          headers={**auth(user.key), "traceparent": header},
                          json={"conversation_id": cid, "message_id": question["id"]}, timeout=60)
    assert response.status_code == 200, response.text
    frames = frames_of(response)
    assert any(isinstance(f, dict) and f.get("type") == "retrieval" for f in frames) and frames[-1] == "[DONE]"

    def complete(spans: list[Span]) -> list[Span] | None:
        mine = [s for s in spans if s.trace_id == trace_id]
        kinds = {s.kind for s in mine}
        return mine if {"server", "internal"} <= kinds and any(
            s.attributes.get("gen_ai.operation.name") == "chat" and s.kind == "client" for s in mine) else None

    spans = collector.wait_for(complete)
    server = one(spans, "server")
    retrieval = one(spans, "internal")
    assert server.parent_span_id == client_span
    assert server.attributes["gen_ai.operation.name"] == "chat" and server.name == "chat tr-chat"
    assert retrieval.parent_span_id == server.span_id
    assert retrieval.name == f"retrieval {cid}" and retrieval.attributes["gen_ai.operation.name"] == "retrieval"
    assert retrieval.attributes["gen_ai.data_source.id"] == str(cid)
    assert retrieval.attributes["inferd.retrieval.passages"] >= 1
    embedding_calls = [s for s in spans if s.kind == "client" and s.attributes["gen_ai.operation.name"] == "embeddings"]
    chat_calls = [s for s in spans if s.kind == "client" and s.attributes["gen_ai.operation.name"] == "chat"]
    assert embedding_calls and all(s.parent_span_id == retrieval.span_id for s in embedding_calls)
    assert chat_calls and all(s.parent_span_id == server.span_id for s in chat_calls)
    assert_no_text(spans, "AMBER-7731", "Pelican")


def test_capture_content_puts_the_prompt_and_reply_in_the_spans(
        capture_server: Server, capture_collector: Collector) -> None:
    key, _ = new_key(capture_server)
    for stream in (False, True):
        header, trace_id, _ = new_traceparent()
        secret = f"otter-{secrets.token_hex(4)}"
        reply = chat(capture_server, key, {"model": "tr-echo", "stream": stream, "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": f"say {secret}"}]}, header)
        assert reply.status_code == 200, reply.text
        spans = capture_collector.trace(trace_id, 2)
        server, attempt = one(spans, "server"), one(spans, "client")
        inputs = json.loads(server.attributes["gen_ai.input.messages"])
        assert inputs[-1] == {"role": "user", "content": f"say {secret}"}
        for span in (server, attempt):
            output = json.loads(span.attributes["gen_ai.output.messages"])
            assert output[0]["role"] == "assistant" and secret in output[0]["content"], (stream, output)
        assert server.resource["service.name"] == "inferd"  # the default; the endpoint came from the environment


def test_a_call_a_guardrail_checks_is_never_captured(capture_server: Server, capture_collector: Collector) -> None:
    key = capture_server.create_key(org=GUARDED_ORG)
    for stream in (False, True):
        header, trace_id, _ = new_traceparent()
        address = f"heron.{secrets.token_hex(4)}@example.com"
        reply = chat(capture_server, key, {"model": "tr-echo", "stream": stream,
                                           "messages": [{"role": "user", "content": f"write to {address}"}]}, header)
        assert reply.status_code == 200, reply.text
        assert address not in reply.text and "[EMAIL]" in reply.text  # the guardrail redacted it
        spans = capture_collector.trace(trace_id, 2)
        assert len(spans) == 2
        for span in spans:
            assert "gen_ai.input.messages" not in span.attributes and "gen_ai.output.messages" not in span.attributes
        assert_no_text(spans, address, "write to")

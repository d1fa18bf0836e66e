"""Guardrails on every route that carries text, on the running server over the fake upstream
(`mock-echo` answers with the text it received, `mock-tools` calls a tool with it): chat, Messages
and Responses, blocking and streamed, each with an input block, an input redaction, an output
block and an output redaction; conversation turns (generate) and batch lines; tool-call arguments
in replies and in the request's history, and tool results; the usage row's `guardrail` when an
output guardrail withheld a reply; values cut across two, three or ten stream chunks; the holdback
of a guarded stream and the absence of one without a guardrail."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Iterator

import httpx
import orjson
import pytest

from inferd.guardrails.pii import LOOKAHEAD, MAX_SPANS
from inferd.guardrails.stream import StreamRedactor
from tests.batches.conftest import content as file_lines
from tests.batches.conftest import create as create_batch
from tests.batches.conftest import wait_for as wait_for_batch
from tests.conversations.conftest import mint_user
from tests.harness import Server, Upstream, auth, own_backend, pg_drop_database, serving

EMAIL = "jane.doe+news@example.org"
CARD = "4111 1111 1111 1111"
SECRETS = (EMAIL, CARD, "4111")
TEXT = f"Please write to {EMAIL} and charge card {CARD} for the order."
REDACTED = "Please write to [EMAIL] and charge card [CREDIT_CARD] for the order."
CUTS = (2, 4, 9, 10, 13, 20)  # the pieces (in characters) of the `cut-N` models' streams

TOML = """
[conversations]
embedding_model = "embed"
default_chat_model = "echo"

[batches]
window_seconds = 600
retention_seconds = 600
max_concurrency = 4

[[models]]
id = "echo"
base_url = "{upstream}/v1"
upstream_model = "mock-echo"
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "tools"
base_url = "{upstream}/v1"
upstream_model = "mock-tools"
capabilities = ["tools"]
tokenizer = "upstream"

[[models]]
id = "embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock"
""" + "".join(f"""
[[models]]
id = "cut-{n}"
base_url = "{{upstream}}/v1"
upstream_model = "mock-echo-cut-{n}"
tokenizer = "upstream"
""" for n in CUTS) + """
[[guardrails]]
name = "mask-in"
kind = "pii"
direction = "input"
action = "redact"
entities = ["email", "credit_card"]
applies_to = ["c-mask-in"]

[[guardrails]]
name = "block-in"
kind = "pii"
direction = "input"
action = "block"
applies_to = ["c-block-in"]

[[guardrails]]
name = "mask-out"
kind = "pii"
direction = "output"
action = "redact"
entities = ["email", "credit_card"]
applies_to = ["c-mask-out"]

[[guardrails]]
name = "block-out"
kind = "pii"
direction = "output"
action = "block"
entities = ["credit_card"]
applies_to = ["c-block-out"]

[[guardrails]]
name = "cards-out"
kind = "pii"
direction = "output"
action = "redact"
entities = ["credit_card"]
applies_to = ["c-cards"]
"""

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a customer up",
                                           "parameters": {"type": "object",
                                                          "properties": {"query": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Server]:
    """A server with its batch worker, on a database of its own (its worker meets no other batches)."""
    folder = tmp_path_factory.mktemp("guardrail-routes")
    backend, pg_name = own_backend(folder, "guardrails")
    try:
        with serving(folder, backend, upstream, TOML, batch_worker=True) as srv:
            yield srv
    finally:
        if pg_name:
            pg_drop_database(os.environ["INFERD_DATABASE_URL"], pg_name)


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON events of an SSE response, in order."""
    return [orjson.loads(block.split("data: ", 1)[1]) for block in response.text.split("\n\n")
            if "data: {" in block]


def chat_content(response: httpx.Response, stream: bool) -> tuple[str, str | None]:
    """(the reply's text, its last finish_reason) of a chat completion, blocking or streamed."""
    if not stream:
        choice = response.json()["choices"][0]
        return choice["message"]["content"] or "", choice["finish_reason"]
    text, finish = "", None
    for chunk in events(response):
        for choice in chunk.get("choices") or ():
            text += (choice.get("delta") or {}).get("content") or ""
            finish = choice.get("finish_reason") or finish
    return text, finish


def call(server: Server, key: str, path: str, stream: bool, text: str = TEXT, model: str = "echo",
         **extra: Any) -> httpx.Response:
    """One call of a chat dialect with `text` as the user's message."""
    body: dict[str, Any] = {"model": model, "stream": stream, **extra}
    headers = auth(key)
    if path == "/messages":
        body |= {"max_tokens": 200, "messages": [{"role": "user", "content": text}]}
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    elif path == "/responses":
        body |= {"input": text}
    else:
        body |= {"messages": [{"role": "user", "content": text}]}
    return httpx.post(server.v1 + path, headers=headers, json=body, timeout=30)


def api_usage(server: Server, key: str) -> list[dict[str, Any]]:
    """The key's usage rows as GET /v1/usage gives them (newest first)."""
    response = httpx.get(server.v1 + "/usage", headers=auth(key), timeout=30)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def upstream_text(upstream: Upstream) -> str:
    """Everything the last chat request the upstream received said, as JSON text."""
    return orjson.dumps(upstream.last_chat_body()["messages"]).decode()


PATHS = ["/chat/completions", "/messages", "/responses"]


@pytest.mark.parametrize("stream", [False, True], ids=["blocking", "streamed"])
@pytest.mark.parametrize("path", PATHS)
def test_input_block_on_every_dialect(guarded: Server, upstream: Upstream, path: str, stream: bool) -> None:
    key = guarded.create_key(org="c-block-in")
    before = len(upstream.requests())
    reply = call(guarded, key, path, stream)
    assert reply.status_code == 400, reply.text
    assert "block-in" in reply.text and not any(secret in reply.text for secret in SECRETS)
    assert len(upstream.requests()) == before  # no engine was reached
    assert guarded.usage_rows(key) == []


@pytest.mark.parametrize("stream", [False, True], ids=["blocking", "streamed"])
@pytest.mark.parametrize("path", PATHS)
def test_input_redact_on_every_dialect(guarded: Server, upstream: Upstream, path: str, stream: bool) -> None:
    key = guarded.create_key(org="c-mask-in")
    reply = call(guarded, key, path, stream)
    assert reply.status_code == 200, reply.text
    sent = upstream_text(upstream)
    assert not any(secret in sent for secret in SECRETS) and "[EMAIL]" in sent and "[CREDIT_CARD]" in sent
    assert "[EMAIL]" in reply.text and not any(secret in reply.text for secret in SECRETS)  # the echo


@pytest.mark.parametrize("stream", [False, True], ids=["blocking", "streamed"])
@pytest.mark.parametrize("path", PATHS)
def test_output_block_on_every_dialect_names_the_guardrail_on_the_usage_row(
        guarded: Server, upstream: Upstream, path: str, stream: bool) -> None:
    key = guarded.create_key(org="c-block-out")
    reply = call(guarded, key, path, stream)
    assert reply.status_code == 200, reply.text
    assert "4111" not in reply.text
    marker = {"/chat/completions": "content_filter", "/messages": "refusal", "/responses": "content_filter"}[path]
    assert marker in reply.text
    assert CARD in upstream_text(upstream)  # the engine was reached, with the card: its answer was withheld
    [row] = guarded.usage_rows(key)
    assert row["guardrail"] == "block-out" and row["status_code"] == 200 and row["cost_usd"] > 0
    [shown] = api_usage(guarded, key)
    assert shown["guardrail"] == "block-out"
    # A reply with nothing to withhold: no guardrail on its row.
    assert call(guarded, key, path, stream, text="nothing personal here").status_code == 200
    rows = api_usage(guarded, key)
    assert [r["guardrail"] for r in rows] == [None, "block-out"]


@pytest.mark.parametrize("stream", [False, True], ids=["blocking", "streamed"])
@pytest.mark.parametrize("path", PATHS)
def test_output_redact_on_every_dialect(guarded: Server, path: str, stream: bool) -> None:
    key = guarded.create_key(org="c-mask-out")
    reply = call(guarded, key, path, stream)
    assert reply.status_code == 200, reply.text
    assert not any(secret in reply.text for secret in SECRETS)
    assert "[EMAIL]" in reply.text and "[CREDIT_CARD]" in reply.text
    [row] = guarded.usage_rows(key)
    assert row["guardrail"] is None  # a redaction withholds nothing


def tool_arguments(response: httpx.Response, stream: bool) -> tuple[list[str], str | None]:
    """The arguments of each tool call of a chat reply (streamed deltas joined by index), and its
    finish_reason."""
    if not stream:
        choice = response.json()["choices"][0]
        return [c["function"]["arguments"] for c in choice["message"].get("tool_calls") or ()], choice["finish_reason"]
    calls: dict[int, str] = {}
    finish = None
    for chunk in events(response):
        for choice in chunk.get("choices") or ():
            for delta in (choice.get("delta") or {}).get("tool_calls") or ():
                calls[delta["index"]] = calls.get(delta["index"], "") + ((delta.get("function") or {}).get("arguments")
                                                                          or "")
            finish = choice.get("finish_reason") or finish
    return [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("stream", [False, True], ids=["blocking", "streamed"])
def test_tool_call_arguments_in_replies_are_redacted_or_withheld(guarded: Server, stream: bool) -> None:
    """`mock-tools` calls the tool with `{"query": <the user's message>}`."""
    masked = call(guarded, guarded.create_key(org="c-mask-out"), "/chat/completions", stream, model="tools",
                  tools=TOOLS)
    assert masked.status_code == 200, masked.text
    assert not any(secret in masked.text for secret in SECRETS)
    arguments, finish = tool_arguments(masked, stream)
    assert [json.loads(a) for a in arguments] == [{"query": REDACTED}] and finish == "tool_calls"

    key = guarded.create_key(org="c-block-out")
    blocked = call(guarded, key, "/chat/completions", stream, model="tools", tools=TOOLS)
    assert blocked.status_code == 200 and "4111" not in blocked.text
    arguments, finish = tool_arguments(blocked, stream)
    assert finish == "content_filter" and not any(CARD in a for a in arguments)
    assert [r["guardrail"] for r in guarded.usage_rows(key)] == ["block-out"]


@pytest.mark.parametrize("path", ["/messages", "/responses"])
def test_tool_calls_of_the_other_dialects_are_redacted_when_streamed(guarded: Server, path: str) -> None:
    tools = [{"name": "lookup", "description": "Look a customer up",
              "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}] \
        if path == "/messages" else [{"type": "function", "name": "lookup", "description": "Look a customer up",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]
    reply = call(guarded, guarded.create_key(org="c-mask-out"), path, True, model="tools", tools=tools)
    assert reply.status_code == 200, reply.text
    assert not any(secret in reply.text for secret in SECRETS)
    pieces = [e.get("delta", {}).get("partial_json") if path == "/messages" else e.get("delta")
              for e in events(reply)
              if e.get("type") in ("content_block_delta", "response.function_call_arguments.delta")]
    assert json.loads("".join(p for p in pieces if isinstance(p, str))) == {"query": REDACTED}


HISTORY = [
    {"role": "user", "content": "Find the customer."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "lookup", "arguments": json.dumps({"email": EMAIL})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": f"Found: card {CARD}."},
    {"role": "user", "content": "Thanks, go on."},
]


def test_tool_call_arguments_and_tool_results_in_the_input(guarded: Server, upstream: Upstream) -> None:
    masked = httpx.post(guarded.v1 + "/chat/completions", headers=auth(guarded.create_key(org="c-mask-in")),
                        json={"model": "echo", "messages": HISTORY, "tools": TOOLS}, timeout=30)
    assert masked.status_code == 200, masked.text
    sent = upstream.last_chat_body()["messages"]
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"email": "[EMAIL]"}
    assert sent[1]["tool_calls"][0]["id"] == "call_1" and sent[2]["content"] == "Found: card [CREDIT_CARD]."
    assert not any(secret in orjson.dumps(sent).decode() for secret in SECRETS)

    key = guarded.create_key(org="c-block-in")
    for history in (HISTORY[:2] + [{"role": "tool", "tool_call_id": "call_1", "content": "none"}], HISTORY[2:3]):
        before = len(upstream.requests())
        refused = httpx.post(guarded.v1 + "/chat/completions", headers=auth(key), timeout=30,
                             json={"model": "echo", "messages": history, "tools": TOOLS})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "guardrail_blocked", refused.text
        assert len(upstream.requests()) == before


def test_tool_use_and_results_of_the_other_dialects_in_the_input(guarded: Server, upstream: Upstream) -> None:
    key = guarded.create_key(org="c-mask-in")
    messages = httpx.post(guarded.v1 + "/messages", timeout=30,
                          headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                          json={"model": "echo", "max_tokens": 100, "messages": [
                              {"role": "user", "content": "Find the customer."},
                              {"role": "assistant", "content": [
                                  {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"email": EMAIL}}]},
                              {"role": "user", "content": [
                                  {"type": "tool_result", "tool_use_id": "toolu_1", "content": f"card {CARD}"},
                                  {"type": "text", "text": "go on"}]}]})
    assert messages.status_code == 200, messages.text
    sent = upstream_text(upstream)
    assert not any(secret in sent for secret in SECRETS) and "[EMAIL]" in sent and "[CREDIT_CARD]" in sent

    responses = httpx.post(guarded.v1 + "/responses", headers=auth(key), timeout=30, json={"model": "echo", "input": [
        {"role": "user", "content": "Find the customer."},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": json.dumps({"email": EMAIL})},
        {"type": "function_call_output", "call_id": "c1", "output": f"card {CARD}"},
        {"role": "user", "content": "go on"}]})
    assert responses.status_code == 200, responses.text
    sent = upstream_text(upstream)
    assert not any(secret in sent for secret in SECRETS) and "[EMAIL]" in sent and "[CREDIT_CARD]" in sent


def generate(server: Server, org: str, text: str = TEXT) -> tuple[httpx.Response, Any, int]:
    """A conversation turn of a new user of `org` (model `echo`); (response, user, conversation id).
    The turn streams (200) unless it is refused before its stream starts."""
    user = mint_user(server, org)
    cid = user.create(title="kept")["id"]
    question = user.say(cid, text)
    response = httpx.post(f"{server.v1}/conversations/{cid}/generate", params={"model": "echo"},
                          headers=auth(user.key), json={"conversation_id": cid, "message_id": question["id"]},
                          timeout=60)
    assert response.status_code in (200, 400), response.text
    return response, user, cid


def turn_text(response: httpx.Response) -> str:
    return "".join(e["chunk"] for e in events(response) if "chunk" in e and "type" not in e)


def test_conversation_turns_pass_the_guardrails(guarded: Server, upstream: Upstream) -> None:
    masked_in, _, _ = generate(guarded, "c-mask-in")
    sent = upstream_text(upstream)
    assert not any(secret in sent for secret in SECRETS) and "[EMAIL]" in sent
    assert "[EMAIL]" in turn_text(masked_in)

    before = len(upstream.requests())
    blocked_in, _, _ = generate(guarded, "c-block-in")
    assert "guardrail_blocked" in blocked_in.text and not any(secret in blocked_in.text for secret in SECRETS)
    assert len(upstream.requests()) == before

    masked_out, user, cid = generate(guarded, "c-mask-out")
    assert turn_text(masked_out) == REDACTED
    assert not any(secret in masked_out.text for secret in SECRETS)
    assert user.detail(cid)["messages"][-1]["message"] == REDACTED  # the stored reply is the one sent

    blocked_out, user, cid = generate(guarded, "c-block-out")
    assert "4111" not in blocked_out.text
    last = user.detail(cid)["messages"][-1]
    # The row keeps what was sent, the text before the card (a conversation row's finish_reason is
    # `stop`, `length` or `tool_calls`: the usage row names the guardrail).
    assert last["role"] == "assistant" and last["message"] == f"Please write to {EMAIL} and charge card "
    assert not [m for m in user.detail(cid)["messages"] if m["role"] != "user" and "4111" in str(m)]
    assert [r["guardrail"] for r in guarded.usage_rows(user.owned_key) if r["workspace"] == "conversations"
            and r["model"] == "echo"] == ["block-out"]


def line(custom_id: str, text: str = TEXT) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "echo", "messages": [{"role": "user", "content": text}]}}


def test_batch_lines_pass_the_guardrails(guarded: Server, upstream: Upstream) -> None:
    results: dict[str, tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]] = {}
    batches = []
    for org in ("c-mask-in", "c-block-in", "c-mask-out", "c-block-out"):
        key = guarded.create_key(org=org)
        batches.append((org, key, create_batch(guarded, key, [line("pii"), line("plain", "nothing personal")])))
    for org, key, batch in batches:
        done = wait_for_batch(guarded, key, batch["id"], ("completed", "failed"), timeout=90)
        assert done["status"] == "completed", done
        outputs = {o["custom_id"]: o for o in file_lines(guarded, key, done.get("output_file_id"))}
        errors = {e["custom_id"]: e for e in file_lines(guarded, key, done.get("error_file_id"))}
        rows = [r for r in guarded.usage_rows(key) if r["workspace"] == "batch"]
        results[org] = (outputs, list(errors.values()), rows)
        if org != "c-block-in":  # its refusal's line holds nothing else than the refusal
            assert "4111" not in orjson.dumps([outputs, errors]).decode()

    def reply(org: str, cid: str = "pii") -> dict[str, Any]:
        return dict(results[org][0][cid]["response"]["body"]["choices"][0])

    assert reply("c-mask-in")["message"]["content"] == REDACTED  # the echo of what the engine saw
    outputs, errors, rows = results["c-block-in"]
    assert "pii" not in outputs and "plain" in outputs
    [error] = [e for e in errors if e["custom_id"] == "pii"]
    assert "guardrail_blocked" in orjson.dumps(error).decode() and EMAIL not in orjson.dumps(error).decode()
    assert len(rows) == 1  # only the plain line reached an engine
    assert reply("c-mask-out")["message"]["content"] == REDACTED
    withheld = reply("c-block-out")
    assert withheld["finish_reason"] == "content_filter" and "4111" not in orjson.dumps(withheld).decode()
    assert sorted(str(r["guardrail"]) for r in results["c-block-out"][2]) == ["None", "block-out"]


def cut_case(value: str, chunks: int) -> tuple[int, str]:
    """A `cut-N` model and a text whose `value` its stream cuts across exactly `chunks` chunks (the
    value starts one whole piece into the text)."""
    for n in CUTS:
        if (len(value) - 1) // n + 1 == chunks:
            return n, "x" * (n - 1) + " " + value + " is the one to use."
    raise AssertionError(f"no cut-N model cuts {value!r} into {chunks} chunks")


LONG_EMAIL = "first.last+tag@sub.mail.example.co.uk"


@pytest.mark.parametrize("chunks", [2, 3, 10])
@pytest.mark.parametrize("value,placeholder", [(LONG_EMAIL, "[EMAIL]"), (CARD, "[CREDIT_CARD]")])
def test_a_value_cut_across_stream_chunks_is_redacted(guarded: Server, value: str, placeholder: str,
                                                      chunks: int) -> None:
    n, text = cut_case(value, chunks)
    start = text.index(value)
    pieces = [text[i:i + n] for i in range(0, len(text), n)]
    assert sum(1 for i in range(0, len(text), n) if i < start + len(value) and i + n > start) == chunks
    reply = call(guarded, guarded.create_key(org="c-mask-out"), "/chat/completions", True, text=text,
                 model=f"cut-{n}")
    assert reply.status_code == 200
    streamed, finish = chat_content(reply, True)
    assert streamed == text.replace(value, placeholder) and finish == "stop"
    assert value not in reply.text and value[-4:] not in reply.text.replace("x", "")
    assert len(pieces) > chunks  # the engine sent the text in pieces, the value across `chunks` of them


def content_deltas(response: httpx.Response) -> list[str]:
    """Each chunk's content delta (empty strings included; the finish chunk's last), the opening
    role chunk left out."""
    return [(e["choices"][0].get("delta") or {}).get("content") or "" for e in events(response)
            if e.get("choices") and "role" not in (e["choices"][0].get("delta") or {})]


PLAIN = "The quick brown fox jumps over the lazy dog, " * 4  # no value of any kind, 180 characters


def test_a_stream_without_a_guardrail_is_not_delayed(guarded: Server) -> None:
    """Each chunk the engine sends goes out as it came (the same text, one event each), as it
    comes: the first text reaches the client long before the engine's last (2 characters every 20 ms)."""
    key = guarded.create_key(org="c-none")
    started = time.monotonic()
    first = None
    deltas: list[str] = []
    with httpx.stream("POST", guarded.v1 + "/chat/completions", headers=auth(key), timeout=30,
                      json={"model": "cut-2", "stream": True,
                            "messages": [{"role": "user", "content": PLAIN}]}) as reply:
        body = ""
        for text in reply.iter_text():
            body += text
            if first is None and '"content":"T' in body.replace(" ", ""):
                first = time.monotonic() - started
    ended = time.monotonic() - started
    deltas = content_deltas(httpx.Response(200, text=body))
    assert deltas == [PLAIN[i:i + 2] for i in range(0, len(PLAIN), 2)] + [""]  # and the finish chunk
    assert first is not None and ended - first > 1.0, (first, ended)  # about 90 chunks 20 ms apart after it


def test_the_holdback_is_at_most_the_longest_match_of_the_guardrails_kinds(guarded: Server) -> None:
    """With a cards-only guardrail, after each chunk the client has all but fewer than the kind's
    span of what the engine sent (the longest card match and the few characters of lookahead that
    decide it): the relay sends one event per engine chunk, so the k-th event's text is what the
    guard let out after k chunks."""
    reply = call(guarded, guarded.create_key(org="c-cards"), "/chat/completions", True, text=PLAIN, model="cut-2")
    deltas = content_deltas(reply)
    bound = StreamRedactor(["credit_card"]).max_span - 1
    assert bound == MAX_SPANS["credit_card"] + LOOKAHEAD - 1
    received = sent = 0
    held = []
    for delta in deltas[:len(PLAIN) // 2]:
        received += 2
        sent += len(delta)
        held.append(received - sent)
    assert max(held) == bound  # held back exactly that much once the stream is long enough...
    assert "".join(deltas) == PLAIN  # ...and all of it comes out in the end

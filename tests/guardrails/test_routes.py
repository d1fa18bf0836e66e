"""Guardrails on the running server, over the fake upstream (`mock-echo` answers with the text it
received): input redacted before the upstream sees it or blocked before any engine (no usage row),
output redacted or blocked in blocking replies and in streams of every chat dialect, embeddings
input, webhooks that fail closed unless open, the actions counted, and nothing matched in the log."""

from __future__ import annotations

from typing import Any, Iterator

import subprocess

import httpx
import pytest

from tests.admin.conftest import cli
from tests.harness import INFERD, Backend, Server, Upstream, auth, clean_env, serving

EMAIL = "jane.doe+news@example.org"
CARD = "4111 1111 1111 1111"
SECRETS = (EMAIL, CARD, "4111")
TEXT = f"Please write to {EMAIL} and charge card {CARD} for the order."

TOML = """
[[models]]
id = "echo"
base_url = "{upstream}/v1"
upstream_model = "mock-echo"
tokenizer = "upstream"

[[models]]
id = "echo-think"
base_url = "{upstream}/v1"
upstream_model = "mock-echo-think"
tokenizer = "upstream"

[[models]]
id = "embed"
type = "embeddings"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[guardrails]]
name = "mask-in"
kind = "pii"
direction = "input"
action = "redact"
entities = ["email", "credit_card"]
applies_to = ["g-mask-in"]

[[guardrails]]
name = "block-in"
kind = "pii"
direction = "input"
action = "block"
applies_to = ["g-block-in"]

[[guardrails]]
name = "mask-out"
kind = "pii"
direction = "output"
action = "redact"
entities = ["email", "credit_card"]
applies_to = ["g-mask-out"]

[[guardrails]]
name = "block-out"
kind = "pii"
direction = "output"
action = "block"
entities = ["credit_card"]
applies_to = ["g-block-out"]

[[guardrails]]
name = "hook-closed"
kind = "webhook"
url = "http://127.0.0.1:{dead_port}/check"
timeout_s = 1
applies_to = ["g-hook-closed"]

[[guardrails]]
name = "opt-in"
kind = "pii"
direction = "input"
action = "block"
entities = ["credit_card"]

[[guardrails]]
name = "hook-open"
kind = "webhook"
url = "http://127.0.0.1:{dead_port}/check"
timeout_s = 1
failure = "open"
applies_to = ["g-hook-open"]
"""

REDACTED = "Please write to [EMAIL] and charge card [CREDIT_CARD] for the order."


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("guardrails"), backend, upstream, TOML) as srv:
        yield srv


def key_of(server: Server, org: str) -> str:
    return server.create_key(org=org)


def chat(server: Server, key: str, stream: bool = False, text: str = TEXT, model: str = "echo") -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", headers=auth(key), timeout=30,
                      json={"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]})


def streamed_text(response: httpx.Response) -> tuple[str, list[str | None]]:
    """The content deltas of a chat stream joined, and every finish_reason seen."""
    import orjson
    content, finishes = [], []
    for block in response.text.split("\n\n"):
        if block.startswith("data: {"):
            chunk = orjson.loads(block[6:])
            for choice in chunk.get("choices") or ():
                content.append((choice.get("delta") or {}).get("content") or "")
                finishes.append(choice.get("finish_reason"))
    return "".join(content), finishes


def dialect(server: Server, key: str, path: str, stream: bool) -> httpx.Response:
    body: dict[str, Any] = {"model": "echo", "stream": stream}
    if path == "/messages":
        body |= {"max_tokens": 200, "messages": [{"role": "user", "content": TEXT}]}
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    else:
        body |= {"input": TEXT}
        headers = auth(key)
    return httpx.post(server.v1 + path, headers=headers, json=body, timeout=30)


@pytest.mark.parametrize("stream", [False, True])
def test_input_is_redacted_before_the_upstream_sees_it(guarded: Server, upstream: Upstream, stream: bool) -> None:
    key = key_of(guarded, "g-mask-in")
    reply = chat(guarded, key, stream)
    assert reply.status_code == 200, reply.text
    sent = upstream.last_chat_body()["messages"][-1]["content"]
    assert sent == REDACTED
    text = streamed_text(reply)[0] if stream else reply.json()["choices"][0]["message"]["content"]
    assert text == REDACTED  # the echo of what the upstream got


@pytest.mark.parametrize("path", ["/messages", "/responses"])
def test_every_dialect_passes_the_input_guardrails(guarded: Server, upstream: Upstream, path: str) -> None:
    key = key_of(guarded, "g-mask-in")
    assert dialect(guarded, key, path, False).status_code == 200
    sent = upstream.last_chat_body()["messages"][-1]["content"]
    text = sent if isinstance(sent, str) else " ".join(p["text"] for p in sent)
    assert EMAIL not in text and CARD not in text and "[EMAIL]" in text


def test_blocked_input_reaches_no_engine_and_writes_no_row(guarded: Server, upstream: Upstream) -> None:
    key = key_of(guarded, "g-block-in")
    before = len(upstream.requests())
    for stream in (False, True):
        reply = chat(guarded, key, stream)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["code"] == "guardrail_blocked" and "block-in" in error["message"]
        assert EMAIL not in reply.text
    assert len(upstream.requests()) == before
    assert guarded.usage_rows(key) == []
    assert chat(guarded, key, text="nothing personal").status_code == 200


def test_blocking_replies_are_redacted_or_withheld(guarded: Server) -> None:
    masked = chat(guarded, key_of(guarded, "g-mask-out")).json()
    assert masked["choices"][0]["message"]["content"] == REDACTED
    withheld = chat(guarded, key_of(guarded, "g-block-out")).json()
    assert withheld["choices"][0]["message"]["content"] == ""
    assert withheld["choices"][0]["finish_reason"] == "content_filter"


def test_streams_are_redacted_as_they_go(guarded: Server) -> None:
    reply = chat(guarded, key_of(guarded, "g-mask-out"), stream=True)
    text, finishes = streamed_text(reply)
    assert text == REDACTED and finishes[-1] == "stop"
    assert not any(secret in reply.text for secret in SECRETS)
    assert reply.text.rstrip().endswith("data: [DONE]")


def test_a_blocked_stream_ends_with_content_filter(guarded: Server) -> None:
    key = key_of(guarded, "g-block-out")
    reply = chat(guarded, key, stream=True)
    text, finishes = streamed_text(reply)
    assert "4111" not in reply.text
    assert text == f"Please write to {EMAIL} and charge card "  # what came before the card went out
    assert finishes[-1] == "content_filter"
    assert reply.text.rstrip().endswith("data: [DONE]")
    [row] = [r for r in guarded.usage_rows(key) if r["status_code"] == 200]  # the call is billed once


@pytest.mark.parametrize("path", ["/messages", "/responses"])
def test_dialect_streams_are_redacted(guarded: Server, path: str) -> None:
    reply = dialect(guarded, key_of(guarded, "g-mask-out"), path, True)
    assert reply.status_code == 200
    assert not any(secret in reply.text for secret in SECRETS)
    assert "[EMAIL]" in reply.text and "[CREDIT_CARD]" in reply.text


def test_embeddings_input(guarded: Server, upstream: Upstream) -> None:
    masked = key_of(guarded, "g-mask-in")
    reply = httpx.post(guarded.v1 + "/embeddings", headers=auth(masked), timeout=30,
                       json={"model": "embed", "input": [TEXT, "plain"]})
    assert reply.status_code == 200, reply.text
    sent = [r for r in upstream.requests() if r["path"] == "/v1/embeddings"][-1]["body"]["input"]
    assert sent == [REDACTED, "plain"]
    tokens = httpx.post(guarded.v1 + "/embeddings", headers=auth(masked), timeout=30,
                        json={"model": "embed", "input": [101, 2023, 102]})
    assert tokens.status_code == 400 and tokens.json()["error"]["code"] == "guardrail_blocked"
    blocked = httpx.post(guarded.v1 + "/embeddings", headers=auth(key_of(guarded, "g-block-in")), timeout=30,
                         json={"model": "embed", "input": TEXT})
    assert blocked.status_code == 400 and blocked.json()["error"]["code"] == "guardrail_blocked"


def test_a_webhook_that_cannot_answer_fails_closed_unless_open(guarded: Server) -> None:
    closed = chat(guarded, key_of(guarded, "g-hook-closed"))
    assert closed.status_code == 503 and closed.json()["error"]["code"] == "guardrail_unavailable"
    assert chat(guarded, key_of(guarded, "g-hook-open")).status_code == 200


def test_actions_are_counted_and_nothing_matched_is_logged(guarded: Server) -> None:
    chat(guarded, key_of(guarded, "g-mask-in"))
    chat(guarded, key_of(guarded, "g-block-in"))
    metrics = httpx.get(guarded.base_url + "/metrics", timeout=10).text
    assert 'inferd_guardrail_actions_total{action="redact",direction="input",guardrail="mask-in"}' in metrics
    assert 'inferd_guardrail_actions_total{action="block",direction="input",guardrail="block-in"}' in metrics
    assert not any(secret in metrics for secret in SECRETS)
    log = guarded.log()
    assert not any(secret in log for secret in SECRETS)


def test_an_org_chooses_guardrails_by_name(guarded: Server) -> None:
    """`inferd orgs update ORG --guardrails opt-in` puts the org's calls through a guardrail that
    applies to no org by itself; an empty value takes it off; a name the file lacks is refused."""
    key, other = key_of(guarded, "g-opt"), key_of(guarded, "g-not-opted")
    assert chat(guarded, key).status_code == 200
    cli(guarded, "orgs", "update", "g-opt", "--guardrails", "opt-in")
    refused = chat(guarded, key)
    assert refused.status_code == 400 and "opt-in" in refused.json()["error"]["message"]
    assert chat(guarded, other).status_code == 200  # another org did not choose it
    cli(guarded, "orgs", "update", "g-opt", "--guardrails", "")
    assert chat(guarded, key).status_code == 200
    env = clean_env({**guarded.backend.env(), "INFERD_CONFIG": str(guarded.config),
                     "INFERD_DATA_DIR": str(guarded.data_dir)})
    unknown = subprocess.run([INFERD, "orgs", "update", "g-opt", "--guardrails", "opt-in,nope"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode != 0 and "'nope'" in unknown.stderr
    assert chat(guarded, key).status_code == 200  # nothing was stored


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_goes_through_the_output_guardrails(guarded: Server, stream: bool) -> None:
    """A model that thinks aloud about the card and e-mail address (`mock-echo-think` reasons with
    the user's text): the reasoning is redacted as the answer is, or the reply withheld."""
    masked = chat(guarded, key_of(guarded, "g-mask-out"), stream, model="echo-think")
    assert masked.status_code == 200 and not any(secret in masked.text for secret in SECRETS)
    assert "[EMAIL]" in masked.text and "[CREDIT_CARD]" in masked.text
    blocked = chat(guarded, key_of(guarded, "g-block-out"), stream, model="echo-think")
    assert blocked.status_code == 200 and "4111" not in blocked.text and "content_filter" in blocked.text

"""Guardrails applied to a call's texts (guardrails/policy.py), with webhook guardrails against a
loopback receiver: input block, redact and log; output streams that block or redact across chunk
cuts; webhooks that fail closed (timeout, refused connection, garbage) unless their failure is open;
the `[[guardrails]]` table's checks."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from inferd.config_guardrails import GuardrailConfig, parse_guardrails
from inferd.errors import ConfigError
from inferd.guardrails.policy import GuardrailBlocked, Guardrails, GuardrailUnavailable, Policy

EMAIL = "jane.doe+news@example.org"
CARD = "4111 1111 1111 1111"


class Receiver:
    """A webhook guardrail on 127.0.0.1: answers with `verdict` (a dict, or raw bytes), after `delay` s."""

    def __init__(self) -> None:
        self.verdict: Any = {"action": "allow"}
        self.delay = 0.0
        self.posts: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                receiver.posts.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                time.sleep(receiver.delay)
                body = receiver.verdict if isinstance(receiver.verdict, bytes) else json.dumps(receiver.verdict).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/check"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    hook = Receiver()
    yield hook
    hook.close()


def fail(table: str, key: str | None, problem: str) -> ConfigError:
    return ConfigError(f"{table} {key}: {problem}")


def guardrails(*tables: dict[str, Any]) -> tuple[Guardrails, list[tuple[str, str, str]]]:
    counted: list[tuple[str, str, str]] = []
    configs = parse_guardrails(fail, [{"applies_to": "*", **t} for t in tables])
    return Guardrails(configs, lambda *action: counted.append(action)), counted


def policy_of(*tables: dict[str, Any]) -> tuple[Policy, list[tuple[str, str, str]]]:
    rails, counted = guardrails(*tables)
    policy = rails.policy("acme")
    assert policy is not None
    return policy, counted


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_input_block_redact_and_log() -> None:
    blocking, counted = policy_of({"name": "no-pii", "kind": "pii", "direction": "input", "action": "block"})
    with pytest.raises(GuardrailBlocked) as caught:
        run(blocking.check_input([f"mail me at {EMAIL}"], "fast", "acme"))
    assert caught.value.status == 400 and caught.value.code == "guardrail_blocked"
    assert "no-pii" in caught.value.message and EMAIL not in caught.value.message
    assert counted == [("no-pii", "input", "block")]
    assert run(blocking.check_input(["nothing personal here"], "fast", "acme")) == ["nothing personal here"]

    redacting, counted = policy_of({"name": "mask", "kind": "pii", "action": "redact",
                                    "entities": ["email", "credit_card"]})
    assert run(redacting.check_input([f"{EMAIL} paid with {CARD}", "hi"], "fast", "acme")) == \
        ["[EMAIL] paid with [CREDIT_CARD]", "hi"]
    assert counted == [("mask", "input", "redact")]

    logging_only, counted = policy_of({"name": "watch", "kind": "pii", "action": "log"})
    assert run(logging_only.check_input([f"write to {EMAIL}"], "fast", "acme")) == [f"write to {EMAIL}"]
    assert counted == [("watch", "input", "log")]


def test_deny_patterns_and_direction() -> None:
    policy, _ = policy_of({"name": "codenames", "kind": "deny", "direction": "output", "action": "redact",
                           "patterns": ["(?i)project\\s{1,3}falcon"]})
    assert policy.input == []  # output only: the input is not checked
    stream = policy.output_stream("fast", "acme")
    pieces = [stream.feed(piece) for piece in ["The plan is Proj", "ect   Fal", "con, due in May."]]
    assert "".join(pieces) + run(stream.flush()) == "The plan is [DENIED], due in May."
    with pytest.raises(ConfigError, match="max_match"):
        parse_guardrails(fail, [{"name": "open-ended", "kind": "deny", "patterns": ["secret.*"]}])
    bounded = parse_guardrails(fail, [{"name": "open-ended", "kind": "deny", "patterns": ["secret.*"],
                                       "max_match": 80}])
    assert bounded[0].max_match == 80


@pytest.mark.parametrize("pieces", [2, 3, 10])
def test_an_output_stream_redacts_values_cut_across_chunks(pieces: int) -> None:
    policy, counted = policy_of({"name": "mask", "kind": "pii", "action": "redact", "direction": "output",
                                 "entities": ["email", "credit_card"]})
    text = f"Contact {EMAIL} or charge {CARD} today."
    size = -(-len(text) // pieces)
    chunks = [text[i:i + size] for i in range(0, len(text), size)]
    assert len(chunks) == pieces
    stream = policy.output_stream("fast", "acme")
    out = "".join(stream.feed(chunk) for chunk in chunks) + run(stream.flush())
    assert out == "Contact [EMAIL] or charge [CREDIT_CARD] today."
    assert stream.blocked_by is None and ("mask", "output", "redact") in counted


def test_an_output_stream_that_blocks_sends_nothing_of_the_match() -> None:
    policy, counted = policy_of({"name": "no-cards", "kind": "pii", "action": "block", "direction": "output",
                                 "entities": ["credit_card"]})
    stream = policy.output_stream("fast", "acme")
    sent = ""
    for chunk in ["Your card ", "4111 11", "11 1111 ", "1111 is on file", " and more text follows."]:
        sent += stream.feed(chunk)
    sent += run(stream.flush())
    assert stream.blocked_by == "no-cards"
    assert "4111" not in sent and "1111" not in sent and sent.startswith("Your card")
    assert counted == [("no-cards", "output", "block")]


def test_a_log_only_output_guardrail_changes_and_delays_nothing() -> None:
    policy, counted = policy_of({"name": "watch", "kind": "pii", "action": "log", "direction": "output"})
    stream = policy.output_stream("fast", "acme")
    assert stream.feed(f"mail {EMAIL[:6]}") == f"mail {EMAIL[:6]}"  # nothing held back
    assert stream.feed(EMAIL[6:]) == EMAIL[6:]
    assert run(stream.flush()) == ""
    assert counted == [("watch", "output", "log")]


def test_webhook_verdicts(receiver: Receiver) -> None:
    policy, counted = policy_of({"name": "hook", "kind": "webhook", "url": receiver.url, "direction": "input"})
    receiver.posts.clear()
    receiver.verdict, receiver.delay = {"action": "allow"}, 0
    assert run(policy.check_input(["hello"], "fast", "acme")) == ["hello"]
    assert receiver.posts == [{"direction": "input", "model": "fast", "org": "acme", "texts": ["hello"]}]
    receiver.verdict = {"action": "redact", "texts": ["h***o"]}
    assert run(policy.check_input(["hello"], "fast", "acme")) == ["h***o"]
    receiver.verdict = {"action": "block"}
    with pytest.raises(GuardrailBlocked):
        run(policy.check_input(["hello"], "fast", "acme"))
    assert counted == [("hook", "input", "redact"), ("hook", "input", "block")]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("failure", ["timeout", "refused", "garbage", "bad redact"])
def test_a_webhook_that_fails_refuses_the_call_unless_open(receiver: Receiver, failure: str) -> None:
    url = receiver.url if failure != "refused" else f"http://127.0.0.1:{closed_port()}/check"
    receiver.delay = 3.0 if failure == "timeout" else 0.0
    receiver.verdict = {"timeout": {"action": "allow"}, "refused": {}, "garbage": b"<html>oops</html>",
                        "bad redact": {"action": "redact", "texts": []}}[failure]
    closed, _ = policy_of({"name": "hook", "kind": "webhook", "url": url, "timeout_s": 0.5})
    started = time.monotonic()
    with pytest.raises(GuardrailUnavailable) as caught:
        run(closed.check_input(["hello"], "fast", "acme"))
    assert caught.value.status == 503 and caught.value.code == "guardrail_unavailable"
    assert time.monotonic() - started < 2.5  # timeout_s bounds a webhook that never answers
    opened, _ = policy_of({"name": "hook", "kind": "webhook", "url": url, "timeout_s": 0.5, "failure": "open"})
    assert run(opened.check_input(["hello"], "fast", "acme")) == ["hello"]
    receiver.delay = 0.0


def test_an_output_webhook_sees_the_whole_stream_at_its_end(receiver: Receiver) -> None:
    policy, _ = policy_of({"name": "hook", "kind": "webhook", "url": receiver.url, "direction": "output"})
    receiver.posts.clear()
    receiver.verdict, receiver.delay = {"action": "redact", "texts": ["[withheld]"]}, 0
    stream = policy.output_stream("fast", "acme")
    assert stream.feed("one ") == "" and stream.feed("two") == ""
    assert run(stream.flush()) == "[withheld]"
    assert receiver.posts[-1]["texts"] == ["one two"] and receiver.posts[-1]["direction"] == "output"


def test_which_guardrails_apply_to_an_org() -> None:
    configs = parse_guardrails(fail, [
        {"name": "everyone", "kind": "pii", "applies_to": "*"},
        {"name": "acme-only", "kind": "pii", "applies_to": ["acme"]},
        {"name": "opt-in", "kind": "deny", "patterns": ["x{3}"]},
    ])
    rails = Guardrails(configs, lambda *a: None)
    names = lambda policy: [g.config.name for g in policy.input]  # noqa: E731
    assert names(rails.policy("acme")) == ["everyone", "acme-only"]
    assert names(rails.policy("globex")) == ["everyone"]
    assert names(rails.policy("globex", ("opt-in",))) == ["everyone", "opt-in"]
    assert Guardrails(configs[2:], lambda *a: None).policy("globex") is None  # nothing applies: no work


@pytest.mark.parametrize("table,problem", [
    ({"name": "a", "kind": "virus"}, "kind"), ({"name": "a b", "kind": "pii"}, "name"),
    ({"name": "a", "kind": "pii", "entities": ["dna"]}, "entities"),
    ({"name": "a", "kind": "pii", "action": "shout"}, "action"),
    ({"name": "a", "kind": "pii", "url": "http://x"}, "url"),
    ({"name": "a", "kind": "deny"}, "patterns"), ({"name": "a", "kind": "deny", "patterns": ["("]}, "patterns"),
    ({"name": "a", "kind": "webhook", "url": "ftp://x"}, "url"),
    ({"name": "a", "kind": "webhook", "url": "http://x", "failure": "maybe"}, "failure"),
    ({"name": "a", "kind": "pii", "applies_to": 3}, "applies_to"),
])
def test_the_table_is_checked(table: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_guardrails(fail, [table])
    with pytest.raises(ConfigError, match="twice"):
        parse_guardrails(fail, [{"name": "a", "kind": "pii"}, {"name": "a", "kind": "pii"}])
    assert isinstance(parse_guardrails(fail, [{"name": "a", "kind": "pii"}])[0], GuardrailConfig)

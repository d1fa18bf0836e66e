"""Nothing the guardrails matched leaks: calls carrying a value of every PII kind, blocked and
redacted, on the input and the output, blocking and streamed, through pii guardrails and webhook
guardrails (one blocking, one redacting, one that cannot answer), on a server logging text and one
logging JSON; then the log, the /metrics text, the usage rows (through the API and in the
database) hold none of the matched strings.

(Traces are exported by another part of the server; their own tests hold them to the same rule.)"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import httpx
import pytest

from inferd.guardrails.pii import KINDS, find_pii, redact
from tests.harness import Backend, Server, Upstream, auth, serving

# A text with a value of every kind (the matched strings are what `find_pii` finds in it).
TEXT = ("Hi, I'm Anna (anna.k+shop@example.com, +49 30 12345678). Refund to DE89 3704 0044 0532 0130 00. "
        "Card 4111-1111-1111-1111 from 415-555-2671, SSN 078-05-1120, host 10.20.30.40 and 2001:db8::1, "
        "key AKIAIOSFODNN7EXAMPLE; mail j.doe@mail.example.co.uk.")
MATCHED = [TEXT[m.start:m.end] for m in find_pii(TEXT, KINDS)]


class Hook:
    """A webhook guardrail on 127.0.0.1: `/block` blocks, `/redact` replaces every PII value with
    its placeholder (it is the guard: it sees the texts)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                asked = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if self.path == "/block":
                    verdict: dict[str, Any] = {"action": "block"}
                else:
                    verdict = {"action": "redact", "texts": [redact(t, find_pii(t, KINDS)) for t in asked["texts"]]}
                body = json.dumps(verdict).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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
id = "cut"
base_url = "{upstream}/v1"
upstream_model = "mock-echo-cut-3"
tokenizer = "upstream"

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
"""

GUARDRAILS = [
    ("block-in", "pii", "input", "block"), ("mask-in", "pii", "input", "redact"),
    ("block-out", "pii", "output", "block"), ("mask-out", "pii", "output", "redact"),
    ("watch", "pii", "both", "log"),
    ("hook-block", "webhook", "input", "block"), ("hook-mask", "webhook", "both", "redact"),
    ("hook-dead", "webhook", "both", "block"),
]


def config(hook: Hook) -> str:
    tables = []
    for name, kind, direction, action in GUARDRAILS:
        table = f'\n[[guardrails]]\nname = "{name}"\nkind = "{kind}"\ndirection = "{direction}"\n'
        if kind == "pii":
            table += f'action = "{action}"\n'
        elif name == "hook-dead":
            table += 'url = "http://127.0.0.1:{dead_port}/check"\ntimeout_s = 1\n'
        else:
            table += f'url = "{hook.url}/{action}"\ntimeout_s = 5\n'
        tables.append(table + f'applies_to = ["k-{name}"]\n')
    return TOML + "".join(tables)


@pytest.fixture(scope="module")
def hook() -> Iterator[Hook]:
    receiver = Hook()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module", params=["text", "json"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, backend: Backend,
           upstream: Upstream, hook: Hook) -> Iterator[Server]:
    """A server logging in `text` or `json` (`INFERD_LOG_FORMAT`)."""
    with serving(tmp_path_factory.mktemp(f"leaks-{request.param}"), backend, upstream, config(hook),
                 extra_env={"INFERD_LOG_FORMAT": request.param}) as srv:
        yield srv


def calls(server: Server, key: str) -> list[httpx.Response]:
    """Every kind of call that carries text: chat (a plain model, one that reasons aloud, one whose
    stream cuts values across chunks, one that calls a tool with the text), Messages, Responses
    and embeddings, blocking and streamed."""
    made = []
    for stream in (False, True):
        for model in ("echo", "echo-think", "cut", "tools"):
            body: dict[str, Any] = {"model": model, "stream": stream, "messages": [{"role": "user", "content": TEXT}]}
            if model == "tools":
                body["tools"] = [{"type": "function", "function": {"name": "lookup", "parameters": {
                    "type": "object", "properties": {"query": {"type": "string"}}}}}]
            made.append(httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=body, timeout=30))
        made.append(httpx.post(server.v1 + "/messages", headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                               json={"model": "echo", "stream": stream, "max_tokens": 300,
                                     "messages": [{"role": "user", "content": TEXT}]}, timeout=30))
        made.append(httpx.post(server.v1 + "/responses", headers=auth(key), timeout=30,
                               json={"model": "echo", "stream": stream, "input": TEXT}))
    made.append(httpx.post(server.v1 + "/embeddings", headers=auth(key), json={"model": "embed", "input": TEXT},
                           timeout=30))
    return made


def test_no_matched_string_leaks_into_logs_metrics_or_usage(server: Server) -> None:
    assert len(MATCHED) == 10 and {m.kind for m in find_pii(TEXT, KINDS)} == set(KINDS)
    keys = {name: server.create_key(org=f"k-{name}") for name, *_ in GUARDRAILS}
    for name, key in keys.items():
        replies = calls(server, key)
        statuses = {r.status_code for r in replies}
        if name in ("block-in", "hook-block"):
            assert statuses == {400}, name
        elif name == "hook-dead":
            assert statuses == {503}, name
        else:
            assert statuses == {200}, (name, [r.text for r in replies if r.status_code != 200])
        if name != "watch":  # a log-only guardrail lets the echo of the text reach the caller
            leaked = [(m, r.request.url.path) for r in replies for m in MATCHED if m in r.text]
            assert leaked == [], name
    # The guardrails acted: every action is counted.
    metrics = httpx.get(server.base_url + "/metrics", timeout=10).text
    for name, kind, direction, action in GUARDRAILS:
        if name != "hook-dead":
            first = "input" if direction in ("input", "both") else "output"
            assert f'inferd_guardrail_actions_total{{action="{action}",direction="{first}",guardrail="{name}"}}' \
                in metrics, name
    assert not [m for m in MATCHED if m in metrics]

    rows = [row for key in keys.values() for row in server.usage_rows(key)]
    assert len(rows) > 30 and any(row["guardrail"] == "block-out" for row in rows)
    stored = json.dumps(rows, default=str)
    assert not [m for m in MATCHED if m in stored]
    shown = json.dumps([httpx.get(server.v1 + "/usage", headers=auth(key), timeout=30).json() for key in keys.values()])
    assert '"guardrail": "block-out"' in shown and not [m for m in MATCHED if m in shown]

    log = server.log()
    if server.env.get("INFERD_LOG_FORMAT") == "json":  # the server did log JSON: one object a line
        assert [line for line in log.splitlines() if line.startswith("{")]
    assert "watch" in log or "guardrail" in log  # the log did hear of the guardrails...
    assert not [m for m in MATCHED if m in log]  # ...and of none of what they matched
    escaped = [json.dumps(m)[1:-1] for m in MATCHED]
    assert not [m for m in escaped if m in log]

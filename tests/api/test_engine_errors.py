"""Engine errors say nothing internal: they name the model, never the upstream's host, port, URL,
api_key or a file path, on every route; the server's log keeps the detail for operators. An
upstream refusing the gateway's own credentials (401/403) is a 502, not a relayed 401."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from tests.harness import Backend, Server, Upstream, auth, free_port

HELLO = [{"role": "user", "content": "Say hello"}]
BAD_KEY = "rejected-gateway-secret"
FORBIDDEN_KEY = "forbidden-gateway-secret"

# One model per route and failure: `dead-*` on a closed port, `badkey-*` with an api_key the fake refuses.
_KINDS = {"chat": "chat", "embed": "embeddings", "rerank": "reranker", "tts": "tts", "asr": "asr",
          "image": "image-gen"}
MODELS_TOML = "".join(
    f'[[models]]\nid = "{prefix}-{name}"\ntype = "{kind}"\nbase_url = "{{{where}}}/v1"\nupstream_model = "mock"\n'
    f'tokenizer = "upstream"\n{extra}\n'
    for prefix, where, extra in (("dead", "dead", ""), ("badkey", "upstream", f'api_key = "{BAD_KEY}"\n'))
    for name, kind in _KINDS.items()) + f"""
[[models]]
id = "forbidden-chat"
base_url = "{{upstream}}/v1"
upstream_model = "mock"
api_key = "{FORBIDDEN_KEY}"

[[models]]
id = "crash-chat"
base_url = "{{upstream}}/v1"
upstream_model = "mock-crash"

[[models]]
id = "missing-chat"
base_url = "{{upstream}}/v1"
upstream_model = "mock-error-404"

[[models]]
id = "throttled-chat"
base_url = "{{upstream}}/v1"
upstream_model = "mock-error-429"

[[models]]
id = "throttled-later-chat"
base_url = "{{upstream}}/v1"
upstream_model = "mock-throttle-7"

[[models]]
id = "drop-chat"
base_url = "{{upstream}}/v1"
upstream_model = "mock-drop-after-3"
tokenizer = "upstream"

[[models]]
id = "stall-chat"
base_url = "{{upstream}}/v1"
upstream_model = "mock-stall-after-3"
tokenizer = "upstream"
timeout_s = 1
"""


class Wiring:
    """What must never reach a client: the addresses and secrets behind the models."""

    def __init__(self, upstream: Upstream, dead_port: int) -> None:
        self.dead_port = dead_port
        self.upstream_port = upstream.url.rsplit(":", 1)[1]
        self.secrets = ("127.0.0.1", "localhost", "http", "/v1", str(dead_port), self.upstream_port,
                        BAD_KEY, FORBIDDEN_KEY, "/tmp", "inferd-upload", "/srv/", "10.1.2.3", "Traceback")

    def assert_hidden(self, text: str) -> None:
        """Fail when `text` names any of the wiring."""
        leaked = [secret for secret in self.secrets if secret in text]
        assert not leaked, f"{leaked} leaked in {text!r}"


@pytest.fixture(scope="module")
def wiring(upstream: Upstream) -> Wiring:
    return Wiring(upstream, free_port())


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream,
            wiring: Wiring) -> Iterator[Server]:
    """A server whose catalogue holds the broken models above."""
    config = tmp_path_factory.mktemp("engine-errors") / "inferd.toml"
    config.write_text(MODELS_TOML.format(upstream=upstream.url, dead=f"http://127.0.0.1:{wiring.dead_port}"),
                      encoding="utf-8")
    srv = Server.start(Path(config.parent), backend, config)
    try:
        yield srv
    finally:
        srv.stop()


Call = Callable[[Server, str, str], httpx.Response]


def _post(path: str, body: dict[str, Any]) -> Call:
    return lambda server, key, model: httpx.post(server.v1 + path, headers=auth(key), json={"model": model, **body},
                                                 timeout=30)


def _voices(server: Server, key: str, model: str) -> httpx.Response:
    return httpx.get(server.v1 + "/voices", params={"model": model}, headers=auth(key), timeout=30)


def _transcribe(server: Server, key: str, model: str) -> httpx.Response:
    return httpx.post(server.v1 + "/audio/transcriptions", params={"model": model}, headers=auth(key),
                      files={"file": ("a.wav", b"RIFF1234")}, data={"model": "whisper-1"}, timeout=30)


# route -> (the call, the model suffix it uses, whether it writes a usage row)
ROUTES: dict[str, tuple[Call, str, bool]] = {
    "chat": (_post("/chat/completions", {"messages": HELLO}), "chat", True),
    "chat-stream": (_post("/chat/completions", {"messages": HELLO, "stream": True}), "chat", True),
    "count_tokens": (_post("/chat/count_tokens", {"messages": HELLO}), "chat", False),
    "embeddings": (_post("/embeddings", {"input": ["a b c"]}), "embed", True),
    "rerank": (_post("/rerank", {"query": "q", "documents": ["x", "y"]}), "rerank", True),
    "speech": (_post("/audio/speech", {"voice": "alloy", "input": "Hello"}), "tts", True),
    "voices": (_voices, "tts", True),
    "transcriptions": (_transcribe, "asr", True),
    "images": (_post("/images/generations", {"prompt": "p", "size": "8x8"}), "image", True),
}


def _error(reply: httpx.Response) -> dict[str, Any]:
    assert reply.headers["content-type"].startswith("application/json"), reply.text
    error: dict[str, Any] = reply.json()["error"]
    return error


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_an_unreachable_upstream_is_named_by_its_model_only(gateway: Server, wiring: Wiring, route: str) -> None:
    call, suffix, metered = ROUTES[route]
    key = gateway.create_key()
    reply = call(gateway, key, f"dead-{suffix}")
    assert reply.status_code == 503, reply.text
    error = _error(reply)
    assert error["type"] == "engine_error" and error["code"] == "engine_unavailable"
    assert error["message"] == f"The engine for model 'dead-{suffix}' is unreachable"
    wiring.assert_hidden(reply.text)
    assert [r["status_code"] for r in gateway.usage_rows(key)] == ([503] if metered else [])
    assert f"127.0.0.1:{wiring.dead_port}" in gateway.log()  # the operator still learns where it failed


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_refused_gateway_credentials_are_a_502_not_a_relayed_401(gateway: Server, wiring: Wiring,
                                                                 route: str) -> None:
    call, suffix, metered = ROUTES[route]
    key = gateway.create_key()
    reply = call(gateway, key, f"badkey-{suffix}")
    assert reply.status_code == 502, reply.text
    error = _error(reply)
    assert error == {"message": f"The engine for model 'badkey-{suffix}' refused the gateway's credentials "
                                "(upstream answered 401)", "type": "engine_error", "code": "upstream_auth_failed"}
    wiring.assert_hidden(reply.text)  # the fake's body quotes the key: not relayed
    assert [r["status_code"] for r in gateway.usage_rows(key)] == ([502] if metered else [])


@pytest.mark.parametrize("stream", [False, True])
def test_a_403_from_the_upstream_is_a_502_too(gateway: Server, wiring: Wiring, stream: bool) -> None:
    reply = _post("/chat/completions", {"messages": HELLO, "stream": stream})(gateway, gateway.create_key(),
                                                                              "forbidden-chat")
    assert reply.status_code == 502
    assert _error(reply)["message"] == ("The engine for model 'forbidden-chat' refused the gateway's credentials "
                                        "(upstream answered 403)")
    wiring.assert_hidden(reply.text)


@pytest.mark.parametrize("stream", [False, True])
def test_other_4xx_stay_relayed(gateway: Server, stream: bool) -> None:
    reply = _post("/chat/completions", {"messages": HELLO, "stream": stream})(gateway, gateway.create_key(),
                                                                              "missing-chat")
    assert reply.status_code == 404
    assert _error(reply)["code"] == 404 and _error(reply)["type"] == "BadRequestError"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("model", "retry_after"), [("throttled-chat", "1"), ("throttled-later-chat", "7")])
def test_a_relayed_429_says_when_to_come_back(gateway: Server, stream: bool, model: str, retry_after: str) -> None:
    """A 429 always carries Retry-After in whole seconds, the engine's own when it
    sent one; the rejection itself is the engine's, as other 4xx are."""
    key = gateway.create_key()
    reply = _post("/chat/completions", {"messages": HELLO, "stream": stream})(gateway, key, model)
    assert reply.status_code == 429, reply.text
    assert reply.headers["retry-after"] == retry_after
    assert _error(reply)["code"] == 429
    assert [r["status_code"] for r in gateway.usage_rows(key)] == [429]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_5xx_body_is_logged_not_relayed(gateway: Server, wiring: Wiring, stream: bool) -> None:
    key = gateway.create_key()
    reply = _post("/chat/completions", {"messages": HELLO, "stream": stream})(gateway, key, "crash-chat")
    assert reply.status_code == 502
    error = _error(reply)
    assert error == {"message": "The engine for model 'crash-chat' failed (upstream answered 500)",
                     "type": "engine_error", "code": "upstream_error"}
    wiring.assert_hidden(reply.text)
    assert [r["status_code"] for r in gateway.usage_rows(key)] == [502]
    assert "lost the worker at 10.1.2.3:8000" in gateway.log()


def _last_frame(reply: httpx.Response) -> dict[str, Any]:
    frames = [f for f in reply.text.split("\n\n") if f]
    assert "[DONE]" not in reply.text and frames[-1].startswith("data: ")
    error: dict[str, Any] = httpx.Response(200, content=frames[-1][6:]).json()["error"]
    return error


@pytest.mark.parametrize(("model", "status", "code", "message"), [
    ("drop-chat", 502, "upstream_closed", "The engine for model 'drop-chat' broke the stream"),
    ("stall-chat", 504, "timeout", "The engine for model 'stall-chat' sent nothing for 1 s"),
])
def test_a_mid_stream_error_frame_names_the_model_only(gateway: Server, wiring: Wiring, model: str, status: int,
                                                       code: str, message: str) -> None:
    key = gateway.create_key()
    reply = _post("/chat/completions", {"messages": HELLO, "stream": True})(gateway, key, model)
    assert reply.status_code == 200
    assert '"This"' in reply.text  # the failure came after the first words
    assert _last_frame(reply) == {"message": message, "type": "engine_error", "code": code}
    wiring.assert_hidden(reply.text.split("data: ")[-1])
    assert [r["status_code"] for r in gateway.usage_rows(key)] == [status]


def test_an_unreadable_upload_does_not_name_its_temp_file(builtin: Server, builtin_key: str) -> None:
    reply = httpx.post(builtin.v1 + "/audio/transcriptions", headers=auth(builtin_key),
                       files={"file": ("a.mp3", b"this is not audio at all")}, timeout=60)
    assert reply.status_code == 400
    message = _error(reply)["message"]
    assert message.startswith("file: not a readable audio file (")
    assert "/tmp" not in message and "inferd-upload" not in message and builtin.data_dir.name not in message

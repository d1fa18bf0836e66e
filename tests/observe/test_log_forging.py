"""A log line cannot be forged: what a client or an upstream controls
(a percent-decoded request path, an engine's error body) is escaped in the `text` format, and
the `json` format escapes it as JSON does; either way no line of the log is anyone's but a record's."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import httpx
import pytest

from inferd.observe.logs import configure_logging, escape_controls
from tests.harness import Backend, Server, Upstream, auth, serving

ECHO_TOML = """
[[models]]
id = "echo-error"
base_url = "{upstream}/v1"
upstream_model = "mock-error-echo"
"""

FORGED = "2030-01-01 00:00:00,000 ERROR inferd [forged] FORGED-LINE"


def _forge(server: Server) -> None:
    """A chat whose engine echoes the message in a 500 (logged, not relayed), and requests whose
    paths carry a line feed, a carriage return and an escape sequence before a fake record."""
    key = server.create_key()
    for content in (f"hello\n{FORGED}", f"hello\r\n{FORGED}", f"hello\u2028{FORGED}", f"\x1b[2K\r{FORGED}"):
        reply = httpx.post(server.v1 + "/chat/completions", headers=auth(key), timeout=30,
                           json={"model": "echo-error", "messages": [{"role": "user", "content": content}]})
        assert reply.status_code == 502, reply.text
        assert "FORGED" not in reply.text  # an engine's 5xx body is logged, never relayed
    # A request uvicorn cannot parse: its own warning goes through the same handler.
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert raw.recv(1024).startswith(b"HTTP/1.1 400")
    path = FORGED.replace(" ", "%20")
    for url in (f"{server.v1}/models/x%0a{path}", f"{server.v1}/chat/completions%0d%0a{path}",
                f"{server.base_url}/%1b[2K%0d{path}", f"{server.v1}/files/f%0a{path}/content"):
        reply = httpx.get(url, headers=auth(key), timeout=30)
        assert reply.status_code in (404, 405), (url, reply.status_code)


def _wait_for(server: Server, text: str) -> str:
    deadline = time.monotonic() + 5
    while text not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.log()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_line_of_the_log_is_forged(tmp_path: Path, backend: Backend, upstream: Upstream, log_format: str) -> None:
    with serving(tmp_path, backend, upstream, ECHO_TOML, args=("--log-format", log_format)) as server:
        _forge(server)
        log = _wait_for(server, "FORGED-LINE")
    # What the server wrote once it started serving (before it: the first key, on stdout).
    lines = log.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if "serving on http://" in line) + 1:]
    assert not [line for line in lines if line.startswith(FORGED[:10])], log
    forged = [line for line in lines if "FORGED-LINE" in line]
    assert len(forged) >= 4, log  # the four echoes were logged (their engine warnings)
    for line in lines:
        assert "\x1b" not in line and "\r" not in line
    if log_format == "json":
        assert all(isinstance(json.loads(line), dict) for line in lines), log
        assert any(json.loads(line).get("logger") == "uvicorn.error" for line in lines), log
    else:
        # Escaped where they were, on the warning's own line.
        assert any(f"cannot answer: hello\\n{FORGED}" in line for line in forged), forged
        assert any(f"cannot answer: hello\\r\\n{FORGED}" in line for line in forged), forged
        assert any(f"cannot answer: hello\\u2028{FORGED}" in line for line in forged), forged
        assert any(f"cannot answer: \\x1b[2K\\r{FORGED}" in line for line in forged), forged
        assert all(line[:4].isdigit() for line in lines), log
        assert any(" WARNING uvicorn.error [" in line and "Invalid HTTP request" in line for line in lines), log


def test_a_logged_traceback_is_indented_under_its_record(capsys: pytest.CaptureFixture[str]) -> None:
    """app.py's handler of an unhandled error logs the (percent-decoded) path and the traceback,
    whose exception text may quote a client too."""
    configure_logging("text")
    log = logging.getLogger("inferd")
    try:
        try:
            raise ValueError(f"bad value\n{FORGED}")
        except ValueError:
            log.exception("unhandled error on %s %s", "GET", f"/v1/x\n{FORGED}")
        err = capsys.readouterr().err
    finally:
        for name in ("inferd", "uvicorn"):
            for handler in list(logging.getLogger(name).handlers):
                if getattr(handler, "_inferd", False):
                    logging.getLogger(name).removeHandler(handler)
    lines = err.splitlines()
    assert f"unhandled error on GET /v1/x\\n{FORGED}" in lines[0]
    assert lines[1] == "    Traceback (most recent call last):"
    assert all(line.startswith("    ") for line in lines[1:]), err
    assert lines[-2:] == ["    ValueError: bad value", f"    {FORGED}"]  # the exception's own two lines
    assert not [line for line in lines if line.startswith(FORGED[:10])]


def test_escape_controls() -> None:
    assert escape_controls("plain — ünïcode 会议") == "plain — ünïcode 会议"
    assert escape_controls("a\nb\rc\td\x00e\x1bf\x7fg\x85h\u2028i\u2029j") == \
        "a\\nb\\rc\\td\\x00e\\x1bf\\x7fg\\x85h\\u2028i\\u2029j"

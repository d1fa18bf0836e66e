"""Schemathesis against the running server's own `/openapi.json`: every operation, a bounded number
of generated requests each (valid and invalid data), with valid keys. No request may get a 5xx,
and every error must leave in the contract's envelope.

The routes taking multipart/form-data (uploads, transcriptions, generate's form) get a run of their
own, longer, and must really have been sent multipart bodies.

By hand: INFERD_FUZZ_EXAMPLES (default 15) and INFERD_FUZZ_MULTIPART_EXAMPLES (default 100) set the
examples per operation and mode; INFERD_FUZZ_PATHS (comma-separated paths as the document spells
them, `/v1/files/{file_id}`; a trailing `*` matches a prefix) keeps only those operations, e.g.
`INFERD_FUZZ_EXAMPLES=200 INFERD_FUZZ_PATHS='/v1/audio/*,/v1/files' pytest tests/api/test_fuzz.py`.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import hypothesis
import orjson
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from tests.conftest import MODELS_TOML
from tests.harness import IDP_TABLE, Backend, Server, Upstream, serving

# Examples per operation and mode; INFERD_FUZZ_EXAMPLES raises it for a longer run by hand.
EXAMPLES_PER_MODE = int(os.environ.get("INFERD_FUZZ_EXAMPLES", "15"))
MULTIPART_EXAMPLES_PER_MODE = int(os.environ.get("INFERD_FUZZ_MULTIPART_EXAMPLES", "100"))
FUZZ_PATHS = [p.strip() for p in os.environ.get("INFERD_FUZZ_PATHS", "").split(",") if p.strip()]
MULTIPART = "multipart/form-data"
MULTIPART_PATHS = {"/v1/audio/transcriptions", "/v1/files", "/v1/conversations/{id}/files/vectorize",
                   "/v1/conversations/{conversation_id}/generate"}
SKIPPED_PATHS = ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect")
USER_SCOPED = ("/v1/conversations", "/v1/sources")
ANTHROPIC_DIALECT = ("/v1/messages",)  # Anthropic's envelope


def _envelope_problem(path: str, status: int, body: bytes, content_type: str) -> str | None:
    """What is wrong with an error reply's body, or None when it is in the route's envelope."""
    if not content_type.startswith("application/json"):
        return f"content type {content_type!r}"
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "body is not JSON"
    if path.startswith(ANTHROPIC_DIALECT):
        error = parsed.get("error") if isinstance(parsed, dict) and parsed.get("type") == "error" else None
        if isinstance(error, dict) and isinstance(error.get("type"), str) and isinstance(error.get("message"), str):
            return None
        return f"not Anthropic's error envelope: {parsed!r:.300}"
    if path.startswith(USER_SCOPED):
        if isinstance(parsed, dict) and parsed.get("success") is False and isinstance(parsed.get("message"), str):
            return None
        return f"not the application envelope: {parsed!r:.300}"
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return f"no error object: {parsed!r:.300}"
    if not isinstance(error.get("message"), str) or not isinstance(error.get("type"), str) or "code" not in error:
        return f"error lacks message/type/code: {error!r:.300}"
    return None


# The names the audio routes default to (`?model=stt`, `?model=tts`): a request that leaves them
# out reaches the fake upstream, not a 404.
DEFAULT_AUDIO_MODELS = """
[[models]]
id = "fuzz-asr"
type = "asr"
base_url = "{upstream}/v1"
upstream_model = "mock"
aliases = ["stt"]

[[models]]
id = "fuzz-tts"
type = "tts"
base_url = "{upstream}/v1"
upstream_model = "mock"
aliases = ["tts"]
"""


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """The test catalogue with an identity provider and an embedder, so the exchange and vectorize
    routes are fuzzed too (not answered 503 for want of either), and models under the audio
    routes' default names."""
    toml = IDP_TABLE + '[conversations]\nembedding_model = "mock-embed"\n' + MODELS_TOML + DEFAULT_AUDIO_MODELS
    with serving(tmp_path_factory.mktemp("fuzz"), backend, upstream, toml) as srv:
        yield srv


@pytest.fixture(scope="module")
def schema(fuzz_server: Server) -> Any:
    """The server's OpenAPI document, loaded by schemathesis."""
    return schemathesis.openapi.from_url(fuzz_server.base_url + "/openapi.json")


def _selected(path: str) -> bool:
    """Whether INFERD_FUZZ_PATHS (when set) names the path."""
    return not FUZZ_PATHS or any(path.startswith(p[:-1]) if p.endswith("*") else path == p for p in FUZZ_PATHS)


def _takes_multipart(operation: Any) -> bool:
    body = operation.definition.raw.get("requestBody") or {}
    return MULTIPART in (body.get("content") or {})


def _fuzz(server: Server, operations: list[Any], examples: int) -> dict[str, int]:
    """Run every operation, positive and negative data; failures are collected, then reported.
    Returns how many requests of each operation went with a multipart body."""
    app_key = server.create_key()
    user_key = server.create_user_key(app_key)
    failures: list[str] = []
    multipart: dict[str, int] = {op.path: 0 for op in operations}
    tried = 0
    session = requests.Session()
    for operation in operations:
        key = user_key if operation.path.startswith(USER_SCOPED) else app_key
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])
            def run(case: Any) -> None:
                nonlocal tried
                try:
                    response = case.call(base_url=server.base_url, session=session, timeout=30,
                                         headers={"Authorization": f"Bearer {key}"})
                except (requests.ConnectionError, requests.Timeout) as exc:
                    failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
                    return
                tried += 1
                if str(response.request.headers.get("Content-Type", "")).startswith(MULTIPART):
                    multipart[operation.path] += 1
                status = response.status_code
                where = f"{case.method} {case.formatted_path} -> {status}"
                if status >= 500:
                    failures.append(f"{where}: {response.text[:300]}")
                elif status >= 400:
                    content_type = response.headers.get("content-type") or [""]
                    problem = _envelope_problem(case.path, status, response.content, content_type[0])
                    if problem:
                        failures.append(f"{where}: {problem}")

            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                # No invalid request exists for an operation without parameters or body.
                assert mode is GenerationMode.NEGATIVE, operation.path
    session.close()
    assert tried >= len(operations) * 5
    assert not failures, "\n".join(sorted(set(failures))[:40])
    return multipart


def _operations(schema: Any) -> list[Any]:
    operations = [result.ok() for result in schema.get_all_operations()]
    return [op for op in operations if op.path not in SKIPPED_PATHS and _selected(op.path)]


# A longer run by hand gets the time it needs (the suite's default is 120 s a test).
@pytest.mark.timeout(max(120, 8 * EXAMPLES_PER_MODE))
def test_every_operation_answers_without_5xx_in_the_envelope(fuzz_server: Server, schema: Any) -> None:
    operations = _operations(schema)
    if not FUZZ_PATHS:
        assert len(operations) >= 30, [op.path for op in operations]
    _fuzz(fuzz_server, operations, EXAMPLES_PER_MODE)


@pytest.mark.timeout(max(120, 2 * MULTIPART_EXAMPLES_PER_MODE))
def test_the_multipart_routes_are_fuzzed_with_multipart_bodies(fuzz_server: Server, schema: Any) -> None:
    """Every route that reads a form says so in the document (else schemathesis sends it none), and
    gets a longer run of its own: names and values with any character, parts missing or repeated."""
    operations = [op for op in _operations(schema) if _takes_multipart(op)]
    if not FUZZ_PATHS:
        assert {op.path for op in operations} == MULTIPART_PATHS
    sent = _fuzz(fuzz_server, operations, MULTIPART_EXAMPLES_PER_MODE)
    assert all(count >= max(1, MULTIPART_EXAMPLES_PER_MODE // 8) for count in sent.values()), sent

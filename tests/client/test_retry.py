"""The spec's retry policy: 429 and 5xx only, reads only, exponential backoff with jitter capped
near 30 s, Retry-After honoured, a bounded number of attempts. Sleeps are injected, so the waits
are checked without being waited."""

from __future__ import annotations

import asyncio
import json

import pytest

from inferd_client import (APIConnectionError, APITimeoutError, AsyncClient, BadRequestError, Client,
                           InternalServerError, RateLimitError, RetryPolicy)
from tests.client.scripted import Reply, ScriptedServer, json_reply
from tests.harness import Server, free_port

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "created": 1, "owned_by": "x"}]})
RATE_LIMITED = json.dumps({"error": {"message": "Rate limit exceeded", "type": "rate_limit_error",
                                     "code": "rate_limit_exceeded"}}).encode()
UNAVAILABLE = json.dumps({"error": {"message": "busy", "type": "server_error",
                                    "code": "service_unavailable"}}).encode()
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def policy(sleeps: list[float], *, rand: float = 0.0, **options: float) -> RetryPolicy:
    """A policy that records its waits instead of sleeping; `rand` fixes the jitter draw."""
    return RetryPolicy(sleep=sleeps.append, random=lambda: rand, **options)  # type: ignore[arg-type]


def test_429_with_retry_after_then_503_then_200(scripted: ScriptedServer, sleeps: list[float]) -> None:
    scripted.answer(json_reply(429, RATE_LIMITED, retry_after="2"), json_reply(503, UNAVAILABLE),
                    Reply(200, MODELS.encode()))
    with Client(scripted.url, "k", retry=policy(sleeps, rand=0.5)) as client:
        models = client.models()
    assert [m.id for m in models.data] == ["m"]
    assert [(s.method, s.path) for s in scripted.seen] == [("GET", "/v1/models")] * 3
    # Retry-After (2 s) is honoured as is; the 503 backs off 2 s less a jitter of 0.5 * 25%.
    assert sleeps == [2.0, pytest.approx(2.0 * (1 - 0.25 * 0.5))]
    assert all(s.headers["Authorization"] == "Bearer k" for s in scripted.seen)


def test_reads_give_up_after_max_attempts(scripted: ScriptedServer, sleeps: list[float]) -> None:
    scripted.answer(json_reply(503, UNAVAILABLE))
    with Client(scripted.url, "k", retry=policy(sleeps)) as client, pytest.raises(InternalServerError) as raised:
        client.get_batch("batch_1")
    assert len(scripted.seen) == 4  # the default: 4 attempts
    assert sleeps == [1.0, 2.0, 4.0]
    assert raised.value.status == 503 and raised.value.code == "service_unavailable"
    assert raised.value.type == "server_error" and raised.value.message == "busy"


def test_max_attempts_is_configurable(scripted: ScriptedServer, sleeps: list[float]) -> None:
    scripted.answer(json_reply(500, UNAVAILABLE))
    with Client(scripted.url, "k", max_attempts=2, retry=policy(sleeps)) as client:
        with pytest.raises(InternalServerError):
            client.models()
    assert len(scripted.seen) == 2 and len(sleeps) == 1


def test_backoff_doubles_and_is_capped_near_30_seconds(scripted: ScriptedServer) -> None:
    scripted.answer(json_reply(502, UNAVAILABLE))
    no_jitter: list[float] = []
    with Client(scripted.url, "k", retry=policy(no_jitter, max_attempts=9)) as client:
        with pytest.raises(InternalServerError):
            client.models()
    assert no_jitter == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    full_jitter: list[float] = []
    scripted.answer(json_reply(502, UNAVAILABLE))
    with Client(scripted.url, "k", retry=policy(full_jitter, rand=0.999, max_attempts=9)) as client:
        with pytest.raises(InternalServerError):
            client.models()
    assert all(0.75 * n <= j < n for j, n in zip(full_jitter, no_jitter))


def test_real_jitter_spreads_waits_within_bounds() -> None:
    waits = [RetryPolicy().backoff(3) for _ in range(200)]
    assert all(3.0 <= w <= 4.0 for w in waits) and len(set(waits)) > 100


@pytest.mark.parametrize("status", [429, 500, 503])
def test_writes_are_never_retried(scripted: ScriptedServer, sleeps: list[float], status: int) -> None:
    scripted.answer(json_reply(status, UNAVAILABLE, retry_after="1"))
    with Client(scripted.url, "k", retry=policy(sleeps)) as client:
        with pytest.raises((InternalServerError, RateLimitError)) as raised:
            client.chat("m", CHAT["messages"])
        assert raised.value.status == status
        for write in (lambda: client.cancel_batch("batch_1"), lambda: client.create_file(b"{}\n"),
                      lambda: client.embeddings("m", "x"), lambda: client.delete_file("file_1")):
            with pytest.raises((InternalServerError, RateLimitError)):
                write()
    assert [s.method for s in scripted.seen] == ["POST", "POST", "POST", "POST", "DELETE"]
    assert sleeps == []


def test_count_tokens_is_a_read(scripted: ScriptedServer, sleeps: list[float]) -> None:
    scripted.answer(json_reply(503, UNAVAILABLE), Reply(200, b'{"input_tokens": 9, "context_window": 4096}'))
    with Client(scripted.url, "k", retry=policy(sleeps)) as client:
        counted = client.count_tokens("m", CHAT["messages"])
    assert (counted.input_tokens, counted.context_window) == (9, 4096)
    assert len(scripted.seen) == 2 and json.loads(scripted.seen[0].body)["model"] == "m"


@pytest.mark.parametrize("status", [400, 401, 402, 403, 404, 413, 422])
def test_other_4xx_are_not_retried(scripted: ScriptedServer, sleeps: list[float], status: int) -> None:
    scripted.answer(json_reply(status, b'{"error": {"message": "no", "type": "t", "code": "c"}}'))
    with Client(scripted.url, "k", retry=policy(sleeps)) as client, pytest.raises(Exception) as raised:
        client.models()
    assert len(scripted.seen) == 1 and sleeps == []
    assert getattr(raised.value, "status") == status
    if status == 400:
        assert isinstance(raised.value, BadRequestError)


def test_a_retry_after_too_long_is_not_waited_for(scripted: ScriptedServer, sleeps: list[float]) -> None:
    scripted.answer(json_reply(429, RATE_LIMITED, retry_after="3600"))
    with Client(scripted.url, "k", retry=policy(sleeps)) as client, pytest.raises(RateLimitError) as raised:
        client.models()
    assert len(scripted.seen) == 1 and sleeps == []
    assert raised.value.retry_after == 3600 and raised.value.code == "rate_limit_exceeded"


def test_connection_failures_retry_reads_not_writes(sleeps: list[float]) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with Client(closed, "k", retry=policy(sleeps)) as client:
        with pytest.raises(APIConnectionError):
            client.models()
        assert sleeps == [1.0, 2.0, 4.0]
        with pytest.raises(APIConnectionError):
            client.chat("m", CHAT["messages"])
    assert sleeps == [1.0, 2.0, 4.0]


def test_read_timeouts_are_retried(scripted: ScriptedServer, sleeps: list[float]) -> None:
    scripted.answer(Reply(200, MODELS.encode(), delay=0.5), Reply(200, MODELS.encode()))
    with Client(scripted.url, "k", timeout=0.1, retry=policy(sleeps)) as client:
        assert client.models().data[0].id == "m"
    assert len(scripted.seen) == 2 and sleeps == [1.0]
    scripted.answer(Reply(200, b"{}", delay=0.5))
    with Client(scripted.url, "k", timeout=0.1, retry=policy(sleeps)) as client, pytest.raises(APITimeoutError):
        client.chat("m", CHAT["messages"])
    assert len(scripted.seen) == 1


def test_async_client_follows_the_same_policy(scripted: ScriptedServer, sleeps: list[float]) -> None:
    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    async def go() -> None:
        retry = RetryPolicy(async_sleep=record, random=lambda: 0.0)
        async with AsyncClient(scripted.url, "k", retry=retry) as client:
            scripted.answer(json_reply(429, RATE_LIMITED, retry_after="3"), json_reply(500, UNAVAILABLE),
                            Reply(200, MODELS.encode()))
            assert (await client.models()).data[0].id == "m"
            assert len(scripted.seen) == 3
            scripted.answer(json_reply(503, UNAVAILABLE))
            with pytest.raises(InternalServerError):
                await client.chat("m", CHAT["messages"])
            assert len(scripted.seen) == 1

    asyncio.run(go())
    assert sleeps == [3.0, 2.0]


def test_the_real_server_retry_after_is_honoured(server: Server, sleeps: list[float]) -> None:
    key = server.create_key(rpm=2)
    with Client(server.base_url, key, retry=policy(sleeps)) as client:
        client.models()
        client.models()
        with pytest.raises(RateLimitError) as raised:
            client.models()  # every attempt is refused within the minute; each wait is the server's
    retry_after = raised.value.retry_after
    assert retry_after is not None and 0 < retry_after <= 60
    assert len(sleeps) == 3 and all(0 < s <= 60 for s in sleeps)
    assert raised.value.type == "rate_limit_error"


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=2.0)

"""Model pools against the running server: routing spreads, affinity
sticks and moves, failover before the first byte, fallbacks, back-pressure, one usage row per call
naming the deployment that answered, and every route failing over alike."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest

from tests.batches.conftest import create, wait_for
from tests.harness import Server, auth
from tests.pools.conftest import Fleet

HELLO = [{"role": "user", "content": "hello"}]


def chat(server: Server, key: str, model: str, stream: bool = False, **body: Any) -> httpx.Response:
    """One chat completion (a stream read to its end)."""
    payload = {"model": model, "messages": HELLO, "stream": stream, **body}
    headers = auth(key)
    if not stream:
        return httpx.post(server.v1 + "/chat/completions", headers=headers, json=payload, timeout=30)
    with httpx.stream("POST", server.v1 + "/chat/completions", headers=headers, json=payload, timeout=30) as reply:
        reply.read()
        return reply


def deployments_used(server: Server, key: str) -> list[str]:
    """The `deployment` of each of the key's usage rows, oldest first."""
    return [row["deployment"] for row in sorted(server.usage_rows(key), key=lambda r: r["id"])]


def new_key(server: Server, models: tuple[str, ...] | None = None) -> str:
    """A key of a fresh org (allowed `models` only, when given)."""
    org = f"org-{uuid.uuid4().hex[:8]}"
    server.create_org(org, models)
    return server.create_key(org=org)


def test_least_busy_spreads_calls_over_the_deployments(pool_server: Server) -> None:
    key = new_key(pool_server)
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: chat(pool_server, key, "pool"), range(30)))
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies if r.status_code != 200]
    assert all(r.json()["model"] == "pool" for r in replies)
    spread = Counter(deployments_used(pool_server, key))
    assert sum(spread.values()) == 30 and set(spread) == {"pool-a", "pool-b", "pool-c"}, spread
    assert min(spread.values()) >= 6, spread


def test_round_robin_follows_the_weights(pool_server: Server) -> None:
    key = new_key(pool_server)
    for _ in range(30):
        assert chat(pool_server, key, "rr").status_code == 200
    used = deployments_used(pool_server, key)
    assert Counter(used) == {"rr-a": 20, "rr-b": 10}
    assert "rr-b, rr-b" not in ", ".join(used)  # spread out, not bunched


def test_affinity_keeps_a_user_on_one_deployment_and_moves_only_the_dead_ones_users(
        pool_server: Server, fleet: Fleet) -> None:
    key = new_key(pool_server)
    owner: dict[str, str] = {}
    for n in range(18):
        user = f"user-{n}"
        for _ in range(2):
            assert chat(pool_server, key, "sticky", user=user).status_code == 200
        rows = deployments_used(pool_server, key)[-2:]
        assert rows[0] == rows[1], (user, rows)  # sticks
        owner[user] = rows[0]
    assert len(set(owner.values())) >= 2, owner  # users spread
    # The session header is a key too.
    for _ in range(3):
        response = httpx.post(pool_server.v1 + "/chat/completions", json={"model": "sticky", "messages": HELLO},
                              headers={**auth(key), "x-session-affinity": "session-42"}, timeout=30)
        assert response.status_code == 200
    assert len(set(deployments_used(pool_server, key)[-3:])) == 1
    # sticky-2 (upstream k2) dies: its users move, everyone else's stay where they were.
    fleet.kill("k2")
    try:
        moved = {}
        for user, before in owner.items():
            reply = chat(pool_server, key, "sticky", user=user)
            assert reply.status_code == 200, reply.text
            moved[user] = deployments_used(pool_server, key)[-1]
        for user, before in owner.items():
            if before == "sticky-2":
                assert moved[user] != "sticky-2"
            else:
                assert moved[user] == before, (user, before, moved[user])
    finally:
        fleet.restart("k2")


def test_failover_then_fallbacks_skipping_a_model_the_org_may_not_use(pool_server: Server) -> None:
    key = new_key(pool_server, ("doomed", "pool"))
    for stream in (False, True):
        reply = chat(pool_server, key, "doomed", stream=stream)
        assert reply.status_code == 200, reply.text
        if stream:
            chunks = [orjson.loads(line[6:]) for line in reply.text.splitlines()
                      if line.startswith("data: {")]
            assert {chunk["model"] for chunk in chunks} == {"pool"} and reply.text.endswith("data: [DONE]\n\n")
        else:
            assert reply.json()["model"] == "pool"
    rows = sorted(pool_server.usage_rows(key), key=lambda r: r["id"])
    assert len(rows) == 2  # one row per call, whatever the attempts
    for row in rows:
        assert row["model"] == "pool" and row["deployment"] in ("pool-a", "pool-b", "pool-c")
        assert row["status_code"] == 200
        # priced at the model that answered (1 and 2 USD per million), not the doomed one's 50
        assert row["cost_usd"] == (row["prompt_tokens"] * 1.0 + row["completion_tokens"] * 2.0) / 1e6


def test_every_deployment_and_fallback_failing_gives_the_last_failure(pool_server: Server) -> None:
    key = new_key(pool_server, ("doomed",))  # "pool" not allowed: no fallback left
    reply = chat(pool_server, key, "doomed")
    assert reply.status_code in (502, 503), reply.text
    [row] = pool_server.usage_rows(key)
    assert row["model"] == "doomed" and row["deployment"] in ("doomed-x", "doomed-y")
    assert row["status_code"] == reply.status_code and row["completion_tokens"] == 0


def test_a_relayed_4xx_is_final_and_a_429_fails_over(pool_server: Server, fleet: Fleet) -> None:
    key = new_key(pool_server)
    fleet.reset("b")
    reply = chat(pool_server, key, "picky")
    assert reply.status_code == 400
    assert fleet.chat_calls("b") == 0  # never tried elsewhere
    assert deployments_used(pool_server, key) == ["picky-a"]
    reply = chat(pool_server, key, "throttled")
    assert reply.status_code == 200, reply.text
    assert deployments_used(pool_server, key) == ["picky-a", "throttled-b"]


def _received(fleet: Fleet, upstream: str, marker: str) -> bool:
    """Whether one upstream has received a chat request whose messages hold `marker`."""
    return any(r["path"] == "/v1/chat/completions" and marker in str(r["body"].get("messages"))
               for r in fleet.upstreams[upstream].requests())


def test_back_pressure_waits_in_line_then_answers_503_without_a_usage_row(pool_server: Server, fleet: Fleet) -> None:
    key = new_key(pool_server)
    marker = f"tight-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(chat, pool_server, key, "tight", messages=[{"role": "user", "content": marker}])
        # The second call is sent once the first holds the one slot: its upstream has the request.
        deadline = time.monotonic() + 30
        while not _received(fleet, "a", marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _received(fleet, "a", marker)
        started = time.monotonic()
        second = pool.submit(chat, pool_server, key, "tight").result()
        waited = time.monotonic() - started
        # Order, not a bound on the wait: the second is refused while the first (1.5 s upstream)
        # still holds the slot, so it gave up in line instead of waiting for the slot to free.
        first_still_running = not first.done()
        assert first.result().status_code == 200
    assert second.status_code == 503 and second.json()["error"]["code"] == "model_overloaded"
    assert second.json()["error"]["type"] == "server_error" and int(second.headers["retry-after"]) >= 1
    assert first_still_running and waited >= 0.25  # queue_timeout_s = 0.3: it did wait in line
    assert len(pool_server.usage_rows(key)) == 1
    # With room in the line, calls wait their turn and all answer (max_in_flight = 1, 0.4 s each).
    started = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda _: chat(pool_server, key, "queued"), range(3)))
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert time.monotonic() - started >= 1.1  # one at a time


@pytest.mark.timeout(240)
def test_the_line_is_first_come_first_served(pool_server: Server, fleet: Fleet) -> None:
    """One deployment at max_in_flight 1 answering in 0.5 s, six calls started 0.25 s apart: every
    other call arrives just as a slot frees, and must still wait behind the calls already in line.
    The engine must see them in the order they came, in each of 20 rounds. Each caller keeps a warm
    connection, so a call reaches the server the moment it is sent."""
    key = new_key(pool_server)
    callers = [httpx.Client(base_url=pool_server.v1, headers=auth(key), timeout=60) for _ in range(6)]
    try:
        for client in callers:
            assert client.get("/models").status_code == 200
        orders = []
        for _ in range(20):
            marker = uuid.uuid4().hex[:8]
            with ThreadPoolExecutor(6) as pool:
                replies = []
                for n, client in enumerate(callers):
                    body = {"model": "fifo", "messages": [{"role": "user", "content": f"{marker}-{n}"}]}
                    replies.append(pool.submit(client.post, "/chat/completions", json=body))
                    time.sleep(0.25)
                assert [r.result().status_code for r in replies] == [200] * 6
            seen = [str(r["body"]["messages"][0]["content"]) for r in fleet.upstreams["c"].requests()
                    if r["path"] == "/v1/chat/completions" and marker in str(r["body"]["messages"][0]["content"])]
            orders.append([int(content.rsplit("-", 1)[1]) for content in seen])
    finally:
        for client in callers:
            client.close()
    assert [order for order in orders if order != list(range(6))] == [], orders


def _load(server: Server, key: str, model: str, seconds: float, workers: int,
          at: float, action: Any) -> tuple[int, list[str], list[str]]:
    """`workers` threads calling `model` (blocking and streamed in turn) for `seconds`; `action`
    runs once `at` seconds in. Returns (calls, errors, broken): `broken` holds the streams that
    started and then ended in the spec's error frame (a deployment dying mid-stream), `errors`
    every other failure."""
    stop = time.monotonic() + seconds
    errors: list[str] = []
    broken: list[str] = []
    calls = [0]
    lock = threading.Lock()

    def worker(n: int) -> None:
        stream = bool(n % 2)
        with httpx.Client(timeout=30) as client:
            while time.monotonic() < stop:
                payload = {"model": model, "messages": HELLO, "stream": stream}
                late = False
                try:
                    reply = client.post(server.v1 + "/chat/completions", headers=auth(key), json=payload)
                    ok = reply.status_code == 200 and (not stream or reply.text.endswith("data: [DONE]\n\n"))
                    late = not ok and stream and reply.status_code == 200 and _ends_in_error_frame(reply.text)
                    problem = None if ok else f"{reply.status_code} {reply.text[-300:]}"
                except httpx.HTTPError as exc:
                    problem = repr(exc)
                with lock:
                    calls[0] += 1
                    if problem:
                        (broken if late else errors).append(problem)
                stream = not stream

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    time.sleep(at)
    action()
    for thread in threads:
        thread.join()
    return calls[0], errors, broken


def _ends_in_error_frame(text: str) -> bool:
    """Whether an SSE body's last frame is `data: {"error": {...}}` (after at least one chunk)."""
    frames = [f for f in text.split("\n\n") if f]
    if len(frames) < 2 or not frames[-1].startswith("data: "):
        return False
    last = orjson.loads(frames[-1][6:])
    return isinstance(last.get("error"), dict) and {"message", "type", "code"} <= set(last["error"])


def test_a_deployment_killed_under_load_costs_no_client_an_error_and_comes_back(
        pool_server: Server, fleet: Fleet) -> None:
    key = new_key(pool_server)
    log_start = len(pool_server.log().splitlines())
    calls, errors, broken = _load(pool_server, key, "fleet", seconds=6, workers=12, at=2,
                                  action=lambda: fleet.kill("k2"))
    assert errors == [] and calls > 100, (calls, errors[:5])
    # A stream whose first chunk had reached its client when the kill landed cannot move:
    # it ends in its error frame. Only the streams in flight on the
    # killed deployment can (6 stream workers, a third of them there at most, usually none).
    assert len(broken) <= 6, broken
    failed = [line for line in pool_server.log().splitlines()[log_start:]
              if "deployment fleet-2 of model fleet failed" in line]
    # After the kill, a few attempts find it dead (the calls in flight, then a probe call when a
    # cooldown runs out, unless the health probe keeps it cooling): far fewer than the calls.
    assert 1 <= len(failed) <= calls / 20, (len(failed), calls)
    rows = pool_server.usage_rows(key)
    assert len(rows) == calls, (len(rows), calls)
    cut = [r for r in rows if r["status_code"] != 200]
    assert len(cut) == len(broken) and all(r["deployment"] == "fleet-2" for r in cut), cut
    # Restarted on its port, the health probe (every 0.3 s) brings it back without restarting inferd.
    fleet.restart("k2")
    deadline = time.monotonic() + 10
    while fleet.chat_calls("k2") == 0:
        assert time.monotonic() < deadline, "the restarted deployment never got traffic again"
        assert chat(pool_server, key, "fleet").status_code == 200
        time.sleep(0.05)


def test_embeddings_and_transcriptions_fail_over(pool_server: Server) -> None:
    key = new_key(pool_server)
    reply = httpx.post(pool_server.v1 + "/embeddings", headers=auth(key), timeout=30,
                       json={"model": "embed-pool", "input": ["one text", "two texts"]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "embed-pool" and len(reply.json()["data"]) == 2
    reply = httpx.post(pool_server.v1 + "/audio/transcriptions", params={"model": "stt-pool"}, headers=auth(key),
                       files={"file": ("a.wav", b"RIFF1234")}, data={"model": "whisper-1"}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["text"] == "fake transcript"
    rows = sorted(pool_server.usage_rows(key), key=lambda r: r["id"])
    assert [(r["model"], r["deployment"], r["status_code"]) for r in rows] == [
        ("embed-pool", "embed-live", 200), ("stt-pool", "stt-live", 200)]


def test_batch_lines_fail_over_and_fall_back(pool_server: Server) -> None:
    key = new_key(pool_server, ("doomed", "pool"))
    lines = [{"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "doomed", "messages": HELLO}} for n in range(4)]
    batch = wait_for(pool_server, key, create(pool_server, key, lines)["id"], ("completed",), timeout=60)
    assert batch["request_counts"] == {"total": 4, "completed": 4, "failed": 0}
    rows = [r for r in pool_server.usage_rows(key) if r["workspace"] == "batch"]
    assert len(rows) == 4 and {r["model"] for r in rows} == {"pool"}
    for row in rows:  # half price, at the rates of the model that answered
        assert abs(row["cost_usd"] - 0.5 * (row["prompt_tokens"] + 2 * row["completion_tokens"]) / 1e6) < 1e-12

"""The deployment the README describes, on loopback: three `inferd serve` replicas, each with a data
directory of its own, on one PostgreSQL and one Redis, behind Debian's HAProxy. One replica is
killed (SIGKILL) mid-load: the only requests that fail are those it was answering when it died."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.harness import Backend, Server, Upstream, auth, free_port, write_config

BODY = {"model": "mock-paced", "messages": [{"role": "user", "content": "hi"}]}
MODELS = """
[[models]]
id = "mock-paced"
base_url = "{upstream}/v1"
upstream_model = "mock-sleep-0.1"
"""
LOCAL_REDIS = "redis://127.0.0.1:6379/0"
HAPROXY_CFG = """
global
    maxconn 2000

defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    # A new connection to a replica per request: a connection kept open to a replica that has just
    # died would fail the next request sent on it, where a refused connect is retried elsewhere.
    option http-server-close
    retries 3
    option redispatch
    retry-on conn-failure

frontend api
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /v1/models
    http-check expect status 401
{servers}
"""


@dataclass
class Call:
    started: float
    ended: float
    ok: bool
    detail: str


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if Path(p).exists()), None)
    if found is None:
        pytest.skip("HAProxy is not installed (make install brings Debian's)")
    return found


def test_a_replica_killed_mid_load_fails_only_its_requests(tmp_path: Path, backend: Backend,
                                                           upstream: Upstream) -> None:
    if not backend.database_url.startswith("postgresql"):
        pytest.skip("replicas on machines of their own need PostgreSQL")
    binary = haproxy_binary()
    config_file = write_config(tmp_path / "inferd.toml", MODELS, upstream)
    shared = Backend(backend.database_url, backend.redis_url or LOCAL_REDIS, backend.redis_prefix + "lb:")
    replicas: list[Server] = []
    for i in range(3):
        (tmp_path / f"replica-{i}").mkdir()
        replicas.append(Server.start(tmp_path / f"replica-{i}", shared, config_file))
    port = free_port()
    servers = "\n".join(f"    server r{i} 127.0.0.1:{r.base_url.rsplit(':', 1)[1]} check inter 200ms fall 1 rise 2"
                        for i, r in enumerate(replicas))
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(HAPROXY_CFG.format(port=port, servers=servers), encoding="utf-8")
    log = open(tmp_path / "haproxy.log", "wb")
    proxy = subprocess.Popen([binary, "-db", "-f", str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(base + "/models", timeout=1).status_code == 401:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proxy.poll() is None, (tmp_path / "haproxy.log").read_text()
            time.sleep(0.1)
        key = replicas[0].create_key()
        time.sleep(1.0)  # every replica passes its health checks
        calls: list[Call] = []
        lock = threading.Lock()
        stop = threading.Event()

        def client() -> None:
            with httpx.Client(timeout=30) as http:
                while not stop.is_set():
                    started = time.monotonic()
                    try:
                        answer = http.post(base + "/chat/completions", headers=auth(key), json=BODY)
                        ok, detail = answer.status_code == 200, f"{answer.status_code} {answer.text[:200]}"
                    except httpx.HTTPError as exc:
                        ok, detail = False, repr(exc)
                    with lock:
                        calls.append(Call(started, time.monotonic(), ok, detail))

        threads = [threading.Thread(target=client) for _ in range(12)]
        for thread in threads:
            thread.start()
        time.sleep(2.0)
        killed_at = time.monotonic()
        replicas[1].stop(signal.SIGKILL)  # returns once the process is reaped: its sockets are closed
        died_at = time.monotonic()  # a busy machine takes tens of milliseconds between the two
        time.sleep(3.0)
        stop.set()
        for thread in threads:
            thread.join(60)
    finally:
        proxy.terminate()
        proxy.wait(10)
        log.close()
        for replica in replicas:
            replica.stop()
    failed = [c for c in calls if not c.ok]
    for c in failed:
        print(f"failed: began {c.started - killed_at:+.3f} s, ended {c.ended - killed_at:+.3f} s from the kill "
              f"(dead at {died_at - killed_at:+.3f} s): {c.detail[:100]}")
    after = [c for c in calls if c.started > died_at]
    assert len(calls) > 100 and len(after) > 30, (len(calls), len(after))
    # A failed call was in flight on the replica as it died: begun before it was dead, ended after
    # the kill. Of 12 concurrent clients, at most 12 can be.
    assert all(c.started <= died_at and c.ended >= killed_at for c in failed), [
        (round(c.started - killed_at, 3), round(c.ended - killed_at, 3), c.detail[:80]) for c in failed]
    assert len(failed) <= 12, [c.detail for c in failed]
    assert all(c.ok for c in after), [c.detail for c in after if not c.ok]

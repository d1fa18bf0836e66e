"""The batch worker on a 10,000-line batch against a fake upstream that answers instantly:
wall time from `POST /v1/batches` to `completed`, and the worker process's own CPU per line.

    .venv/bin/python bench/batch.py [--lines 10000] [--concurrency 8] [--database-url postgresql://…]

It starts on loopback: the fake upstream (tests/fakes/upstream.py, model `mock`), `inferd serve
--no-batch-worker` (the API) and `inferd batch-worker` (measured alone, in its own process), each
with a fresh temporary data dir. Target: the batch finishes in under 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.harness import pg_create_database, pg_drop_database  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TICK = os.sysconf("SC_CLK_TCK")

CONFIG = """
[batches]
max_concurrency = {concurrency}

[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}
"""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_quiet(pid: int, seconds: float = 1.0) -> None:
    """Until the process has used no CPU for `seconds` (start-up done)."""
    last = cpu_seconds(pid)
    while True:
        time.sleep(seconds)
        now = cpu_seconds(pid)
        if now - last < 0.02:
            return
        last = now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8, help="[batches] max_concurrency")
    parser.add_argument("--database-url", default=None,
                        help="a PostgreSQL server to create a fresh database on (dropped after); default: SQLite "
                             "in the temporary data dir")
    parser.add_argument("--profile", default=None, help="write a cProfile of the worker to this file")
    args = parser.parse_args()
    children: list[subprocess.Popen[bytes]] = []
    pg_name = None
    with tempfile.TemporaryDirectory(prefix="inferd-bench-batch-") as tmp:
        try:
            fake = subprocess.Popen([sys.executable, str(ROOT / "tests/fakes/upstream.py"), "--port", "0"],
                                    stdout=subprocess.PIPE)
            children.append(fake)
            assert fake.stdout is not None
            upstream = f"http://127.0.0.1:{int(fake.stdout.readline().split()[1])}"
            config = Path(tmp) / "inferd.toml"
            config.write_text(CONFIG.format(upstream=upstream, concurrency=args.concurrency))
            env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
            env.update(INFERD_CONFIG=str(config), INFERD_DATA_DIR=str(Path(tmp) / "data"))
            if args.database_url:
                pg_name = f"inferd_bench_{uuid.uuid4().hex[:10]}"
                env["INFERD_DATABASE_URL"] = pg_create_database(args.database_url, pg_name)
            made = subprocess.run([str(BIN / "inferd"), "keys", "create", "--org", "bench", "--type", "application",
                                   "--json"], env=env, check=True, capture_output=True)
            key = json.loads(made.stdout.decode().strip().splitlines()[-1])["full_key"]
            port = free_port()
            log = open(Path(tmp) / "serve.log", "wb")
            api = subprocess.Popen([str(BIN / "inferd"), "serve", "--port", str(port), "--no-batch-worker"],
                                   env=env, stdout=log, stderr=subprocess.STDOUT)
            children.append(api)
            base = f"http://127.0.0.1:{port}/v1"
            headers = {"Authorization": f"Bearer {key}"}
            while True:
                try:
                    httpx.get(base + "/models", headers=headers, timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            lines = b"".join(json.dumps({
                "custom_id": f"line-{i}", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "mock-chat", "messages": [{"role": "user", "content": f"question {i}"}]}}).encode()
                + b"\n" for i in range(args.lines))
            uploaded = httpx.post(base + "/files", headers=headers, data={"purpose": "batch"},
                                  files={"file": ("bench.jsonl", lines)}, timeout=60).json()
            profile = [sys.executable, "-m", "cProfile", "-o", args.profile] if args.profile else []
            worker = subprocess.Popen([*profile, str(BIN / "inferd"), "batch-worker"], env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
            children.append(worker)
            time.sleep(1)
            wait_quiet(worker.pid)
            worker_cpu, fake_cpu = cpu_seconds(worker.pid), cpu_seconds(fake.pid)
            started = time.perf_counter()
            batch = httpx.post(base + "/batches", headers=headers, timeout=30, json={
                "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions",
                "completion_window": "24h"}).json()
            while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
                time.sleep(0.05)
                batch = httpx.get(f"{base}/batches/{batch['id']}", headers=headers, timeout=30).json()
            wall = time.perf_counter() - started
            worker_cpu = cpu_seconds(worker.pid) - worker_cpu
            fake_cpu = cpu_seconds(fake.pid) - fake_cpu
            counts = batch["request_counts"]
            output = httpx.get(f"{base}/files/{batch['output_file_id']}/content", headers=headers, timeout=60)
            assert batch["status"] == "completed" and counts["completed"] == args.lines, batch
            assert len(output.content.splitlines()) == args.lines
            print(f"database          {'PostgreSQL' if args.database_url else 'SQLite'}")
            print(f"lines             {args.lines} (max_concurrency {args.concurrency})")
            print(f"wall              {wall:.2f} s  ({args.lines / wall:.0f} lines/s; target < 30 s: "
                  f"{'met' if wall < 30 else 'MISSED'})")
            print(f"worker CPU        {worker_cpu:.2f} s  = {worker_cpu / args.lines * 1e6:.0f} µs per line")
            print(f"fake upstream CPU {fake_cpu:.2f} s  = {fake_cpu / args.lines * 1e6:.0f} µs per line")
        finally:
            for child in reversed(children):
                child.terminate()
            for child in children:
                try:
                    child.wait(15)
                except subprocess.TimeoutExpired:
                    child.kill()
            if pg_name:
                pg_drop_database(args.database_url, pg_name)


if __name__ == "__main__":
    main()

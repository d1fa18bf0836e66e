"""Opening a long conversation: the first page of a 10,000-message thread over HTTP, in under 50 ms.

Writes one conversation of `--messages` messages (default 10,000) through the project's own
repository, with `--branches` side branches (default 20) hung at random points of the thread, the last one
under its first message, and then left by answering on the main line again (so 9,999 rows are
re-activated: the costliest branch switch there is). Then starts `inferd serve` on that
database, mints a user key through POST /v1/auth/exchange (shape B), and times over HTTP, with
one keep-alive connection, `--runs` requests (after 20 warm-ups; latency percentiles, and the
server process's CPU milliseconds per request, which the machine's other load does not inflate) of:

- `open`: GET /v1/conversations/{id} (the newest page of 20; the target: p50 under 50 ms);
- `page-500`: the same with limit=500;
- `before-mid`: the page before a message in the middle of the thread;
- `from-mid`: the page after a message in the middle (a client catching up);
- `list`: GET /v1/conversations (the user's list, latest message embedded).

    .venv/bin/python bench/conversation_open.py                     # SQLite and PostgreSQL
    .venv/bin/python bench/conversation_open.py --db sqlite --runs 500

PostgreSQL gets a fresh database `inferd_bench_conversations` on the server `--pg-url` names.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from inferd.cli.keys import create_key
from inferd.store.conversations import ConversationRepository, NewMessage
from inferd.store.db import create_engine, migrate
from inferd.store.tables import api_keys

INFERD = str(Path(sys.executable).parent / "inferd")
PG_DATABASE = "inferd_bench_conversations"
TARGET_MS = 50.0
CONFIG = """
[[models]]
id = "bench-placeholder"
base_url = "http://127.0.0.1:9/v1"
"""


async def load(database_url: str, messages: int, branches: int) -> dict[str, Any]:
    """Migrate, mint a key owned by a user, write the conversation; returns ids and write timings."""
    from sqlalchemy import select

    engine = create_engine(database_url)
    try:
        await migrate(engine)
        access_key_id, secret = await create_key(engine, "bench", "application", "conversation-bench",
                                                 user_email="reader@bench.test")
        async with engine.connect() as conn:
            row = (await conn.execute(select(api_keys.c.org_id, api_keys.c.user_id).where(
                api_keys.c.access_key_id == access_key_id))).one()
        org_id, user_id = int(row[0]), int(row[1])
        repo = ConversationRepository(engine)
        conversation = await repo.create(org_id=org_id, user_id=user_id, title="ten thousand messages")
        cid = int(conversation["id"])
        started = time.perf_counter()
        batch = [NewMessage(role="user" if i % 2 == 0 else "assistant", user_id=user_id,
                            message=f"message {i}: " + "lorem ipsum dolor sit amet " * 8,
                            finish_reason=None if i % 2 == 0 else "stop") for i in range(messages)]
        written = await repo.append(cid, batch)
        write_s = time.perf_counter() - started
        main_ids = [int(m["id"]) for m in written]
        rng = random.Random(7)
        # The last branch hangs under the first message, so going back re-activates the whole thread.
        parents = [rng.choice(main_ids[:-1]) for _ in range(max(0, branches - 1))] + [main_ids[0]]
        for parent in parents[:branches]:
            await repo.append(cid, [NewMessage(role="user", user_id=user_id, message="an edit",
                                               parent_message_id=parent)])
        started = time.perf_counter()
        await repo.append(cid, [NewMessage(role="user", user_id=user_id, message="back on the main line",
                                           parent_message_id=main_ids[-1])])
        switch_ms = (time.perf_counter() - started) * 1000
        return {"cid": cid, "owned_key": f"{access_key_id}:{secret}", "mid": main_ids[len(main_ids) // 2],
                "write_s": write_s, "switch_ms": switch_ms, "total": messages + branches + 1}
    finally:
        await engine.dispose()


def free_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(database_url: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`inferd serve` on the loaded database; returns the process and its base URL."""
    config = workdir / "inferd.toml"
    config.write_text(CONFIG, encoding="utf-8")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
    env["INFERD_DATABASE_URL"] = database_url
    log = open(workdir / "server.log", "wb")
    process = subprocess.Popen([INFERD, "serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(config),
                                "--data-dir", str(workdir), "--no-batch-worker"], stdout=log, stderr=subprocess.STDOUT,
                               env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(base + "/openapi.json", timeout=1)
            return process, base
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError((workdir / "server.log").read_text())


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(client: httpx.Client, url: str, params: dict[str, Any], runs: int, check: Any,
          server_pid: int) -> dict[str, float]:
    """p50/p90/p99/max in ms of `runs` GETs after 20 warm-ups, and the server's CPU ms per request
    (what the request costs, whatever else the machine is doing); each answer checked."""
    for _ in range(20):
        client.get(url, params=params).raise_for_status()
    cpu_before = cpu_seconds(server_pid)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url, params=params)
        samples.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        check(response.json())
    cpu_ms = (cpu_seconds(server_pid) - cpu_before) * 1000 / runs
    samples.sort()
    return {"cpu": cpu_ms, "p50": statistics.median(samples), "p90": samples[int(len(samples) * 0.9) - 1],
            "p99": samples[max(0, int(len(samples) * 0.99) - 1)], "max": samples[-1]}


def bench(database_url: str, label: str, args: argparse.Namespace) -> bool:
    """Load, serve, time; prints one table; True when the open target holds."""
    loaded = asyncio.run(load(database_url, args.messages, args.branches))
    print(f"\n{label}: {loaded['total']} messages written ({args.messages} in one transaction in "
          f"{loaded['write_s']:.1f} s); answering on the main line again, after a branch at its first message "
          f"(re-activating {args.messages - 1} rows), took {loaded['switch_ms']:.1f} ms")
    with tempfile.TemporaryDirectory(prefix="inferd-conv-bench-") as tmp:
        process, base = start_server(database_url, Path(tmp))
        try:
            minted = httpx.post(base + "/v1/auth/exchange", json={"api_key": loaded["owned_key"]}).json()
            headers = {"Authorization": f"Bearer {minted['user_key']}"}
            url = f"{base}/v1/conversations/{loaded['cid']}"
            mid = loaded["mid"]

            def page_of(n: int) -> Any:
                def check(body: dict[str, Any]) -> None:
                    assert len(body["conversation"]["messages"]) == n, len(body["conversation"]["messages"])
                return check

            cases = [("open", url, {}, page_of(20)), ("page-500", url, {"limit": 500}, page_of(500)),
                     ("before-mid", url, {"before_id": mid}, page_of(20)),
                     ("from-mid", url, {"from_id": mid}, page_of(20)),
                     ("list", f"{base}/v1/conversations", {}, lambda body: None)]
            print(f"{'request':<12} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'cpu ms':>8}")
            results = {}
            with httpx.Client(headers=headers, timeout=30) as client:
                for name, target, params, check in cases:
                    results[name] = stats = timed(client, target, params, args.runs, check, process.pid)
                    print(f"{name:<12} {stats['p50']:>8.2f} {stats['p90']:>8.2f} {stats['p99']:>8.2f} "
                          f"{stats['max']:>8.2f} {stats['cpu']:>8.2f}")
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(15)
    ok = results["open"]["p50"] < TARGET_MS
    print(f"target: open p50 under {TARGET_MS:.0f} ms: {'met' if ok else 'MISSED'}")
    return ok


def pg_fresh(url: str) -> str:
    """A fresh database on the PostgreSQL server `url` names; returns its URL."""
    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')
        finally:
            await conn.close()

    asyncio.run(go())
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + PG_DATABASE, parts.query, parts.fragment))


def main() -> int:
    """Run the benchmark on the chosen databases; exit status 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--branches", type=int, default=20)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--pg-url", default="postgresql://127.0.0.1:5432/test")
    args = parser.parse_args()
    ok = True
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="inferd-conv-db-") as tmp:
            ok &= bench(f"sqlite:///{tmp}/inferd.db", "SQLite", args)
    if args.db in ("postgresql", "both"):
        ok &= bench(pg_fresh(args.pg_url), "PostgreSQL", args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

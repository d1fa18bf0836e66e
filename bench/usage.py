"""Usage reports at scale: a year of usage rows for one key, then every summary and a deep page over HTTP.

Loads `--rows` rows (default 5,000,000) charged to one key, spread evenly over the last 365 days,
with a mix of models, workspaces, users and metadata tags, and fills the per-day rollup from the
same rows with the writer's own hash; then starts `inferd serve` on that database and times, over
HTTP, `GET /v1/usage/summary` for every `group_by` over 30 and 366 days and `GET /v1/usage` pages
at `offset=100000` (p50 and p90 of `--runs` runs after one warm-up). Target: every p50 under 100 ms.

    .venv/bin/python bench/usage.py                          # SQLite and PostgreSQL, 5,000,000 rows
    .venv/bin/python bench/usage.py --db sqlite --rows 500000
    .venv/bin/python bench/usage.py --reuse                  # query the databases the last run loaded

The SQLite file lives in `--dir` (default /tmp/inferd-usage-bench); PostgreSQL gets a database
`inferd_bench_usage` on the server `--pg-url` names (dropped and created again unless --reuse).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson

from inferd.cli.keys import create_key
from inferd.store.db import create_engine, migrate
from inferd.store.usage import ROLLUP_COLUMNS, dims_hash

ROOT = Path(__file__).resolve().parent.parent
INFERD = str(Path(sys.executable).parent / "inferd")
PG_DATABASE = "inferd_bench_usage"
COLUMNS = ("org", "deployment", "key_id", "user_id", "team_id", "model", "workspace", "prompt_tokens",
           "completion_tokens", "cached_prompt_tokens", "latency_ms", "status_code", "cost_usd", "created_at",
           "metadata")
# (model, workspace, share of calls, $ per M input tokens, $ per M output tokens)
MODELS = [("qwen-7b", "chat", 0.35, 0.2, 0.6), ("llama-70b", "chat", 0.15, 0.9, 0.9),
          ("qwen-coder-32b", "chat", 0.15, 0.5, 1.0), ("mini-chat", "chat", 0.15, 0.05, 0.1),
          ("bge-m3", "embeddings", 0.15, 0.02, 0.0), ("bge-reranker", "rerank", 0.05, 0.02, 0.0)]
USERS = [None, None, "11", "12", "13", "14"]
TAGS = [None] + [orjson.dumps({"env": env, "feature": feature}).decode()
                 for env in ("prod", "staging") for feature in ("search", "chat-ui", "agent", "summarise")]
TAG_WEIGHTS = [0.25] + [0.75 / (len(TAGS) - 1)] * (len(TAGS) - 1)
GROUPS = ("model", "workspace", "key_id", "user_id", "day", "metadata.feature")
CONFIG = """
[[models]]
id = "bench-placeholder"
base_url = "http://127.0.0.1:9/v1"
"""


def now() -> datetime:
    """Naive UTC now."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def generate(key_id: str, rows: int, end: datetime, seed: int = 7) -> Iterator[list[tuple[Any, ...]]]:
    """Usage rows in created_at order, in chunks, spread evenly over the 365 days before `end`."""
    rng = random.Random(seed)
    start = end - timedelta(days=365)
    step = (end - start) / rows
    weights = [m[2] for m in MODELS]
    chunk: list[tuple[Any, ...]] = []
    for i in range(rows):
        model, workspace, _, price_in, price_out = rng.choices(MODELS, weights)[0]
        prompt = rng.randint(20, 4000)
        completion = rng.randint(1, 800) if workspace == "chat" else 0
        cost = (prompt * price_in + completion * price_out) / 1e6
        chunk.append(("bench", model, key_id, rng.choice(USERS), None, model, workspace, prompt, completion,
                      prompt // 4 if workspace == "chat" and i % 3 == 0 else 0, rng.randint(50, 3000),
                      200 if i % 50 else 500, cost, start + step * i, rng.choices(TAGS, TAG_WEIGHTS)[0]))
        if len(chunk) == 200_000:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def add_to_rollup(rollup: dict[tuple[str, str, str, str], list[Any]], chunk: list[tuple[Any, ...]]) -> None:
    """Fold rows into hour, day and month groups keyed as the writer keys them (`rollup_deltas`)."""
    hashes: dict[tuple[Any, ...], str] = {}
    for (_, deployment, key_id, _, _, model, workspace, prompt, completion, cached, _, _, cost, created,
         metadata) in chunk:
        dims_key = (model, workspace, deployment, metadata)
        dims = hashes.get(dims_key)
        if dims is None:
            dims = hashes[dims_key] = dims_hash(*dims_key)
        hour = f"{created.year:04d}-{created.month:02d}-{created.day:02d}T{created.hour:02d}"
        for slot in ((key_id, "day", hour[:10], dims), (key_id, "hour", hour, dims), (key_id, "month", hour[:7], dims)):
            group = rollup.get(slot)
            if group is None:
                rollup[slot] = [*slot, model, workspace, deployment, metadata, 1, prompt, cached, completion, cost]
            else:
                group[8] += 1
                group[9] += prompt
                group[10] += cached
                group[11] += completion
                group[12] += cost


async def make_key(database_url: str) -> tuple[str, str]:
    """Migrate the database and mint the key the rows are charged to."""
    engine = create_engine(database_url)
    try:
        await migrate(engine)
        return await create_key(engine, "bench", "application", "usage-bench")
    finally:
        await engine.dispose()


def load_sqlite(path: Path, key_id: str, rows: int, end: datetime) -> None:
    """executemany in big transactions, then the rollup, then ANALYZE."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    insert = f"INSERT INTO usage_rows ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
    rollup: dict[tuple[str, str, str, str], list[Any]] = {}
    for chunk in generate(key_id, rows, end):
        add_to_rollup(rollup, chunk)
        conn.execute("BEGIN")
        conn.executemany(insert, [(*r[:13], r[13].isoformat(" ", "microseconds"), r[14]) for r in chunk])
        conn.execute("COMMIT")
    conn.execute("BEGIN")
    conn.executemany(f"INSERT INTO usage_rollup ({', '.join(ROLLUP_COLUMNS)}) VALUES "
                     f"({', '.join('?' * len(ROLLUP_COLUMNS))})", list(rollup.values()))
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


async def load_postgres(url: str, key_id: str, rows: int, end: datetime) -> None:
    """COPY through asyncpg, then the rollup, then VACUUM ANALYZE (visibility map for index-only scans)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        rollup: dict[tuple[str, str, str, str], list[Any]] = {}
        for chunk in generate(key_id, rows, end):
            add_to_rollup(rollup, chunk)
            await conn.copy_records_to_table("usage_rows", records=chunk, columns=list(COLUMNS))
        await conn.copy_records_to_table("usage_rollup", records=[tuple(g) for g in rollup.values()],
                                         columns=list(ROLLUP_COLUMNS))
        await conn.execute("VACUUM ANALYZE usage_rows")
        await conn.execute("VACUUM ANALYZE usage_rollup")
    finally:
        await conn.close()


async def pg_recreate(admin_url: str) -> str:
    """Drop and create the bench database; its URL."""
    import asyncpg

    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')
    finally:
        await conn.close()
    return pg_url(admin_url)


def pg_url(admin_url: str) -> str:
    """The bench database's URL on the server `admin_url` names."""
    parts = urlsplit(admin_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + PG_DATABASE, parts.query, parts.fragment))


def free_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Serve:
    """`inferd serve` on the bench database (a placeholder model: no engine is ever called)."""

    def __init__(self, database_url: str, workdir: Path) -> None:
        config = workdir / "bench.toml"
        config.write_text(CONFIG, encoding="utf-8")
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
        env["INFERD_DATABASE_URL"] = database_url
        self.log = open(workdir / f"serve-{self.port}.log", "wb")
        self.process = subprocess.Popen(
            [INFERD, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--config", str(config),
             "--data-dir", str(workdir), "--no-batch-worker"], stdout=self.log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"inferd exited: {(workdir / f'serve-{self.port}.log').read_text()}")
            try:
                httpx.get(self.url.removesuffix("/v1") + "/openapi.json", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("inferd did not start")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def queries(end: datetime) -> list[tuple[str, str, dict[str, str]]]:
    """(label, path, params) of every timed request."""
    since_30 = (end - timedelta(days=30)).isoformat() + "Z"
    since_366 = (end - timedelta(days=366)).isoformat() + "Z"
    until = end.isoformat() + "Z"
    timed: list[tuple[str, str, dict[str, str]]] = []
    for days, since in (("30d", since_30), ("366d", since_366)):
        for group in GROUPS:
            timed.append((f"summary group_by={group} {days}", "/usage/summary",
                          {"group_by": group, "from": since, "to": until}))
    timed.append(("summary group_by=model 366d, metadata filter", "/usage/summary",
                  {"group_by": "model", "from": since_366, "to": until, "metadata": '{"feature": "agent"}'}))
    timed.append(("usage model=qwen-7b offset=100000 366d", "/usage",
                  {"model": "qwen-7b", "offset": "100000", "from": since_366, "to": until}))
    timed.append(("usage workspace=embeddings offset=100000 366d", "/usage",
                  {"workspace": "embeddings", "offset": "100000", "from": since_366, "to": until}))
    timed.append(("usage (no filter) offset=100000 30d", "/usage", {"offset": "100000", "from": since_30, "to": until}))
    timed.append(("usage metadata={feature: agent} offset=100000 366d", "/usage",
                  {"metadata": '{"feature": "agent"}', "offset": "100000", "from": since_366, "to": until}))
    return timed


def time_queries(base_url: str, full_key: str, end: datetime, runs: int, loaded: int) -> list[dict[str, Any]]:
    """p50/p90 wall milliseconds of each query, over one keep-alive connection (and one sanity check:
    the 366-day total counts every loaded row)."""
    results = []
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {full_key}"}, timeout=120) as client:
        for label, path, params in queries(end):
            samples = []
            for attempt in range(runs + 1):
                began = time.perf_counter()
                response = client.get(path, params=params)
                elapsed = (time.perf_counter() - began) * 1000
                if response.status_code != 200:
                    raise RuntimeError(f"{label}: {response.status_code} {response.text}")
                if attempt:  # the first run warms caches
                    samples.append(elapsed)
            body = response.json()
            if label == "summary group_by=key_id 366d" and body["data"][0]["requests"] != loaded:
                raise RuntimeError(f"the 366-day total counts {body['data'][0]['requests']} rows, not {loaded}")
            samples.sort()
            results.append({"query": label, "p50_ms": statistics.median(samples),
                            "p90_ms": samples[min(len(samples) - 1, int(len(samples) * 0.9))],
                            "rows": len(body["data"])})
            print(f"  {label:55s} p50 {results[-1]['p50_ms']:7.1f} ms  p90 {results[-1]['p90_ms']:7.1f} ms  "
                  f"({results[-1]['rows']} rows)", flush=True)
    return results


def run_backend(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Load (unless --reuse) and time one database."""
    workdir = Path(args.dir) / name
    workdir.mkdir(parents=True, exist_ok=True)
    state = workdir / "state.json"
    if name == "sqlite":
        database_url = f"sqlite:///{workdir / 'usage.db'}"
    else:
        database_url = pg_url(args.pg_url)
    if args.reuse and state.exists():
        saved = json.loads(state.read_text())
        full_key, end, loaded = saved["key"], datetime.fromisoformat(saved["end"]), saved["rows"]
        print(f"{name}: reusing {loaded:,} rows", flush=True)
    else:
        if name == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{workdir / 'usage.db'}{suffix}").unlink(missing_ok=True)
        else:
            database_url = asyncio.run(pg_recreate(args.pg_url))
        key_id, secret = asyncio.run(make_key(database_url))
        end, loaded = now(), args.rows
        began = time.perf_counter()
        if name == "sqlite":
            load_sqlite(workdir / "usage.db", key_id, loaded, end)
        else:
            asyncio.run(load_postgres(database_url, key_id, loaded, end))
        print(f"{name}: loaded {loaded:,} rows in {time.perf_counter() - began:.0f} s", flush=True)
        full_key = f"{key_id}:{secret}"
        state.write_text(json.dumps({"key": full_key, "end": end.isoformat(), "rows": loaded}))
    server = Serve(database_url, workdir)
    try:
        results = time_queries(server.url, full_key, end, args.runs, loaded)
    finally:
        server.stop()
    return {"database": name, "rows": loaded, "results": results}


def main() -> None:
    """Parse flags, run each database, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--db", default="sqlite,postgresql", help="sqlite, postgresql or both (comma-separated)")
    parser.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL", "postgresql://127.0.0.1:5432/test"),
                        help="a PostgreSQL server (any database on it) where the bench database is created")
    parser.add_argument("--dir", default="/tmp/inferd-usage-bench", help="where the SQLite file and logs go")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per query (after one warm-up)")
    parser.add_argument("--reuse", action="store_true", help="query what the last run loaded")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    reports = [run_backend(name.strip(), args) for name in args.db.split(",") if name.strip()]
    slow = [(r["database"], q["query"], q["p50_ms"]) for r in reports for q in r["results"] if q["p50_ms"] >= 100]
    print("every p50 under 100 ms" if not slow else f"over 100 ms: {slow}")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2))


if __name__ == "__main__":
    main()

"""How many usage rows a replica whose data directory is lost with it can cost (PostgreSQL).

A replica writes each call's row to the journal in its own data directory before the reply ends,
and folds the journal into PostgreSQL a few milliseconds later. If the machine dies and its disk
is never seen again, the rows not folded yet are lost. This starts one replica on PostgreSQL and
Redis, drives it with `--concurrency` clients (each tags its calls), SIGKILLs it mid-load, throws
its data directory away without restarting it, and counts the answered calls whose rows are not
in the database: per run, the rows lost and, at the measured throughput, how many milliseconds of
rows that is.

    INFERD_DATABASE_URL=postgresql://127.0.0.1:5432/test INFERD_REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/lost_disk.py [--runs 5] [--concurrency 32] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inferd.store.db import create_engine  # noqa: E402
from inferd.store.tables import usage_rows  # noqa: E402
from tests.harness import Server, Upstream, auth, own_backend, pg_drop_database, write_config  # noqa: E402

MODELS = """
[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}
"""


async def tags_in_database(url: str, key_id: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(usage_rows.c.metadata).where(usage_rows.c.key_id == key_id))).scalars()
            return {orjson.loads(raw)["n"] for raw in rows}
    finally:
        await engine.dispose()


async def drive(server: Server, key: str, concurrency: int, seconds: float) -> tuple[list[str], float]:
    """Load until SIGKILL at `seconds`; the tags answered 200 and the calls per second before the kill."""
    answered: list[str] = []
    counter = iter(range(10 ** 9))
    dead = asyncio.Event()

    async def client(http: httpx.AsyncClient) -> None:
        while not dead.is_set():
            tag = str(next(counter))
            try:
                reply = await http.post(server.v1 + "/chat/completions", headers=auth(key), json={
                    "model": "mock-chat", "messages": [{"role": "user", "content": "hi"}], "metadata": {"n": tag}})
                if reply.status_code == 200:
                    answered.append(tag)
            except httpx.HTTPError:
                return

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as http:
        tasks = [asyncio.create_task(client(http)) for _ in range(concurrency)]
        began = time.monotonic()
        await asyncio.sleep(seconds)
        rate = len(answered) / (time.monotonic() - began)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
        dead.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return answered, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if not os.environ.get("INFERD_DATABASE_URL", "").startswith("postgres"):
        sys.exit("needs INFERD_DATABASE_URL on PostgreSQL (and INFERD_REDIS_URL)")
    upstream = Upstream.start()
    work = Path(tempfile.mkdtemp(prefix="inferd-lost-disk-"))
    try:
        config = write_config(work / "inferd.toml", MODELS, upstream)
        print("run  answered  req/s   lost rows  lost ms")
        for run in range(args.runs):
            backend, name = own_backend(work, "lostdisk")
            data_dir = work / f"replica-{run}"
            data_dir.mkdir()
            server = Server.start(data_dir, backend, config)
            try:
                key = server.create_key()
                answered, rate = asyncio.run(drive(server, key, args.concurrency, args.seconds))
                shutil.rmtree(data_dir)  # the disk is gone: its journal is never folded
                stored = asyncio.run(tags_in_database(backend.database_url, key.split(":")[0]))
            finally:
                server.stop()
                if name:
                    pg_drop_database(os.environ["INFERD_DATABASE_URL"], name)
            lost = len(set(answered) - stored)
            print(f"{run:>3}  {len(answered):>8}  {rate:>6.0f}  {lost:>9}  {1000 * lost / rate:>7.1f}")
    finally:
        upstream.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

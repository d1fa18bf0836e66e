"""Servers for the batch tests, each on a database of its own (so one server's worker never
runs another's batches): `batch_server` runs the worker inside `inferd serve`; `short_server`
has a 5 s window and a 3 s retention; `api_server` runs no worker (tests start
`inferd batch-worker` processes beside it)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import orjson
import pytest
from sqlalchemy import select

from inferd.store.db import create_engine
from inferd.store.tables import file_chunks

from tests.harness import INFERD, Server, Upstream, auth, clean_env, own_backend, pg_drop_database, write_config

BATCH_TOML = """
[batches]
window_seconds = @WINDOW@
retention_seconds = @RETENTION@
max_concurrency = 8

[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-other"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[models]]
id = "mock-slow"
base_url = "{upstream}/v1"
upstream_model = "mock-sleep-2"
timeout_s = 10
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-paced"
base_url = "{upstream}/v1"
upstream_model = "mock-sleep-0.04"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-err400"
base_url = "{upstream}/v1"
upstream_model = "mock-error-400"

[[models]]
id = "mock-err500"
base_url = "{upstream}/v1"
upstream_model = "mock-error-500"

[[models]]
id = "mock-flaky"
base_url = "{upstream}/v1"
upstream_model = "mock-flaky-2"

[[models]]
# An engine call that never answers, and no timeout_s: only expiry (or a cancel) ends its lines.
id = "mock-hang"
base_url = "{upstream}/v1"
upstream_model = "mock-hang"
"""


def serve_batches(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream, label: str, window: float,
                  retention: float, batch_worker: bool) -> Iterator[Server]:
    """A server with its own database and a `[batches]` table (a generator: next() starts it, close() ends it)."""
    folder = tmp_path_factory.mktemp(label)
    template = BATCH_TOML.replace("@WINDOW@", str(window)).replace("@RETENTION@", str(retention))
    config = write_config(folder / "inferd.toml", template, upstream)
    backend, pg_name = own_backend(folder, "batch")
    (folder / "data").mkdir()
    server = Server.start(folder / "data", backend, config, batch_worker=batch_worker)
    try:
        yield server
    finally:
        server.stop()
        if pg_name:
            pg_drop_database(os.environ["INFERD_DATABASE_URL"], pg_name)


@pytest.fixture(scope="session")
def batch_server(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve` with its batch worker; a long window and retention."""
    yield from serve_batches(tmp_path_factory, upstream, "batch", 600, 600, batch_worker=True)


@pytest.fixture(scope="session")
def short_server(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve` with its batch worker; a 5 s window and a 3 s file retention."""
    yield from serve_batches(tmp_path_factory, upstream, "short", 5, 3, batch_worker=True)


@pytest.fixture(scope="session")
def api_server(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve --no-batch-worker`: batches wait for a separately started worker."""
    yield from serve_batches(tmp_path_factory, upstream, "api", 600, 600, batch_worker=False)


def cli(server: Server, *args: str) -> str:
    """Run `inferd ARGS` against the server's database (as an operator would); its stdout."""
    env = clean_env({**server.backend.env(), "INFERD_DATA_DIR": str(server.data_dir),
                     **({"INFERD_CONFIG": str(server.config)} if server.config else {})})
    done = subprocess.run([INFERD, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


class Worker:
    """An `inferd batch-worker` process beside a server: on the same database, with a data
    directory of its own on PostgreSQL (as on another machine: files are in the database) and the
    server's on SQLite (whose files are in the data directory). `data_dir` chooses one."""

    def __init__(self, server: Server, data_dir: Path | None = None) -> None:
        self.server = server
        if data_dir is None:
            data_dir = server.data_dir
            if server.backend.database_url.startswith("postgresql"):
                data_dir = server.data_dir.parent / f"worker-{uuid.uuid4().hex[:6]}"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.log_path = data_dir / f"worker-{uuid.uuid4().hex[:6]}.log"
        env = clean_env({**server.backend.env(), "INFERD_CONFIG": str(server.config),
                         "INFERD_DATA_DIR": str(data_dir)})
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([INFERD, "batch-worker"], stdout=log, stderr=subprocess.STDOUT, env=env)

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM, then wait."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- helpers the batch tests share ---------------------------------------------------------------

def request_line(custom_id: str, model: str = "mock-chat", content: str = "hello there", **body: Any) -> dict[str, Any]:
    """One input line; the custom_id also goes into the body's metadata, so usage rows name it."""
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": content}],
                     "metadata": {"cid": custom_id}, **body}}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    """Lines as a JSONL file."""
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def upload(server: Server, key: str, content: bytes, purpose: str = "batch") -> dict[str, Any]:
    """POST /v1/files; the file object."""
    response = httpx.post(server.v1 + "/files", headers=auth(key), data={"purpose": purpose},
                          files={"file": ("input.jsonl", content, "application/jsonl")}, timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def create(server: Server, key: str, lines: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Upload the lines and create a batch over them."""
    file_id = upload(server, key, jsonl(lines))["id"]
    response = httpx.post(server.v1 + "/batches", headers=auth(key), timeout=30,
                          json={"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                "completion_window": "24h", **extra})
    assert response.status_code == 200, response.text
    return dict(response.json())


def get(server: Server, key: str, batch_id: str) -> dict[str, Any]:
    """GET /v1/batches/{id}."""
    response = httpx.get(f"{server.v1}/batches/{batch_id}", headers=auth(key), timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def wait_for(server: Server, key: str, batch_id: str, statuses: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
    """Poll until the batch reaches one of `statuses`."""
    deadline = time.monotonic() + timeout
    batch = get(server, key, batch_id)
    while batch["status"] not in statuses:
        assert time.monotonic() < deadline, f"batch stuck in {batch['status']}: {batch}"
        time.sleep(0.2)
        batch = get(server, key, batch_id)
    return batch


def content(server: Server, key: str, file_id: str | None) -> list[dict[str, Any]]:
    """A file's JSONL lines ([] for no file)."""
    if file_id is None:
        return []
    response = httpx.get(f"{server.v1}/files/{file_id}/content", headers=auth(key), timeout=30)
    assert response.status_code == 200, response.text
    return [orjson.loads(line) for line in response.content.splitlines() if line.strip()]


def batch_usage(server: Server, key: str) -> list[dict[str, Any]]:
    """The key's usage rows of workspace `batch`."""
    return [row for row in server.usage_rows(key) if row["workspace"] == "batch"]


def wait_in_flight(upstream: Upstream, marker: str, timeout: float = 20) -> None:
    """Until the fake upstream has received a chat whose message contains `marker` (a line is in flight)."""
    deadline = time.monotonic() + timeout
    while not any(marker in orjson.dumps(r["body"].get("messages")).decode() for r in upstream.requests()):
        assert time.monotonic() < deadline, f"no line with {marker!r} reached the upstream"
        time.sleep(0.05)


def stored_bytes(server: Server, file_id: str) -> bytes | None:
    """The bytes the file store keeps for `file_id` (None: none at all), wherever the server's
    backend keeps them: the data directory (SQLite), or the database's chunks (PostgreSQL)."""
    local = server.data_dir / "files" / f"{file_id}.jsonl"
    if local.exists():
        return local.read_bytes()

    async def chunks() -> list[bytes]:
        engine = create_engine(server.backend.database_url)
        try:
            async with engine.connect() as conn:
                return [bytes(c) for c in (await conn.execute(select(file_chunks.c.data).where(
                    file_chunks.c.file_id == file_id).order_by(file_chunks.c.seq))).scalars()]
        finally:
            await engine.dispose()

    pieces = asyncio.run(chunks())
    return b"".join(pieces) if pieces else None

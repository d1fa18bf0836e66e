"""Files without a shared disk: two `inferd serve` replicas and one `inferd batch-worker`, each with
a data directory of its own, on one PostgreSQL and one Redis, with the files in the database
(the default on PostgreSQL) or in an S3-compatible bucket (moto's server on loopback, speaking the
S3 protocol). Uploads and downloads stream: a 64 MiB file never sits whole in a server's memory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.batches.conftest import BATCH_TOML, Worker, content, get, jsonl, request_line, stored_bytes, upload, \
    wait_for
from tests.batches.test_durability import _check_exactly_once, _lines
from tests.harness import Backend, Server, Upstream, auth, free_port, own_backend, pg_drop_database, write_config

MIB = 1024 * 1024
BUCKET = "inferd-files"
RETENTION_S = 20


def on_postgres_and_redis() -> None:
    """These deployments exist only on PostgreSQL (SQLite is one machine's database)."""
    if not os.environ.get("INFERD_DATABASE_URL", "").startswith("postgres") or not os.environ.get("INFERD_REDIS_URL"):
        pytest.skip("needs INFERD_DATABASE_URL on PostgreSQL and INFERD_REDIS_URL")


def rss_bytes(pid: int) -> int:
    """The resident set size of process `pid`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class PeakRss:
    """Samples a process's resident memory every few milliseconds while in use; `peak` the highest."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            time.sleep(0.005)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a loopback port, with the bucket made; AWS_* point every process at it."""
    port = free_port()
    process = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    saved = {name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.1)
        s3_client(url).create_bucket(Bucket=BUCKET)
        yield url
    finally:
        process.kill()
        process.wait()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


class Deployment:
    """Replicas A and B (`inferd serve --no-batch-worker`) and worker W, three data directories."""

    def __init__(self, root: Path, backend: Backend, config: Path, store: str, s3: str | None, prefix: str) -> None:
        self.store, self.s3, self.prefix = store, s3, prefix
        self.dirs = [root / name for name in ("replica-a", "replica-b", "worker")]
        for folder in self.dirs:
            folder.mkdir()
        self.a = Server.start(self.dirs[0], backend, config)
        self.b = Server.start(self.dirs[1], backend, config)
        self.worker = Worker(self.a, data_dir=self.dirs[2])

    def stop(self) -> None:
        self.worker.stop()
        self.a.stop()
        self.b.stop()

    def local_files(self) -> list[Path]:
        """Stored files (not spool files) in any of the three data directories."""
        return [path for folder in self.dirs for path in (folder / "files").glob("*.jsonl")]

    def in_store(self, file_id: str) -> bytes | None:
        """The bytes the backend keeps for `file_id`, read from the backend itself."""
        if self.s3 is None:
            return stored_bytes(self.a, file_id)
        client = s3_client(self.s3)
        try:
            return bytes(client.get_object(Bucket=BUCKET, Key=f"{self.prefix}{file_id}.jsonl")["Body"].read())
        except client.exceptions.NoSuchKey:
            return None


@pytest.fixture(scope="module", params=["postgres", "s3"])
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               upstream: Upstream) -> Iterator[Deployment]:
    on_postgres_and_redis()
    store = str(request.param)
    root = tmp_path_factory.mktemp(f"nothing-shared-{store}")
    template = BATCH_TOML.replace("@WINDOW@", "600").replace("@RETENTION@", str(RETENTION_S))
    s3, prefix = None, f"run-{uuid.uuid4().hex[:8]}/"
    if store == "s3":
        s3 = request.getfixturevalue("s3_endpoint")
        template += (f'\n[storage]\nbackend = "s3"\nbucket = "{BUCKET}"\nprefix = "{prefix}"\n'
                     f'endpoint_url = "{s3}"\nregion = "us-east-1"\n')
    config = write_config(root / "inferd.toml", template, upstream)
    backend, pg_name = own_backend(root, "files")
    deployed = Deployment(root, backend, config, store, s3, prefix)
    try:
        yield deployed
    finally:
        deployed.stop()
        if pg_name:
            pg_drop_database(os.environ["INFERD_DATABASE_URL"], pg_name)


def test_upload_on_a_batch_on_b_worker_on_a_third_directory(deployment: Deployment) -> None:
    a, b = deployment.a, deployment.b
    key = a.create_key()
    lines = [request_line("ok-1"), request_line("ok-2"), request_line("ok-3"), request_line("bad", model="mock-err400")]
    uploaded = upload(a, key, jsonl(lines))
    assert deployment.in_store(uploaded["id"]) == jsonl(lines)
    created = httpx.post(b.v1 + "/batches", headers=auth(key), timeout=30, json={
        "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    assert created.status_code == 200, created.text
    done = wait_for(b, key, created.json()["id"], ("completed",), timeout=60)
    assert done["request_counts"] == {"total": 4, "completed": 3, "failed": 1}
    for replica in (a, b):
        output = content(replica, key, done["output_file_id"])
        errors = content(replica, key, done["error_file_id"])
        assert sorted(line["custom_id"] for line in output) == ["ok-1", "ok-2", "ok-3"]
        assert [line["custom_id"] for line in errors] == ["bad"]
        raw = httpx.get(f"{replica.v1}/files/{done['output_file_id']}/content", headers=auth(key))
        assert raw.headers["content-disposition"] == f'attachment; filename="{done["id"]}_output.jsonl"'
        assert int(raw.headers["content-length"]) == len(raw.content)
    assert deployment.local_files() == []  # nothing on any process's disk: all of it in the store

    # DELETE through B removes the file for every replica, and its bytes from the store.
    assert deployment.in_store(done["error_file_id"]) is not None
    deleted = httpx.delete(f"{b.v1}/files/{done['error_file_id']}", headers=auth(key))
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    for replica in (a, b):
        for path in ("", "/content"):
            gone = httpx.get(f"{replica.v1}/files/{done['error_file_id']}{path}", headers=auth(key))
            assert gone.status_code == 404
    assert deployment.in_store(done["error_file_id"]) is None

    # Retention (the worker's job, on its own directory) deletes the output file from the store;
    # the input file has no retention.
    deadline = time.monotonic() + RETENTION_S + 30
    while httpx.get(f"{a.v1}/files/{done['output_file_id']}", headers=auth(key)).status_code == 200:
        assert time.monotonic() < deadline, "the retention job did not delete the output file"
        time.sleep(0.3)
    assert deployment.in_store(done["output_file_id"]) is None
    assert httpx.get(f"{b.v1}/files/{done['output_file_id']}/content", headers=auth(key)).status_code == 404
    assert deployment.in_store(uploaded["id"]) == jsonl(lines)


def _big_file(size: int) -> Iterator[bytes]:
    """A JSONL file of exactly `size` bytes, produced a piece at a time."""
    line = b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}' + b" " * 900 + b"\n"
    piece = line * 1024
    left = size
    while left > 0:
        yield piece[:left]
        left -= min(left, len(piece))


def test_64_mib_upload_and_download_stream(deployment: Deployment) -> None:
    """The largest upload allowed goes in and comes out of the store without the server's memory
    growing by more than a few MiB (it is spooled to disk going in, read in 1 MiB pieces going out)."""
    a, b = deployment.a, deployment.b
    key = a.create_key()
    size = 64 * MIB - 4096  # the multipart framing must fit under the 64 MiB cap of the file part
    expected = hashlib.sha256()
    for piece in _big_file(size):
        expected.update(piece)
    small = upload(a, key, b"{}\n")  # warm both paths up: imports, pools, buffers
    for replica in (a, b):
        assert httpx.get(f"{replica.v1}/files/{small['id']}/content", headers=auth(key)).content == b"{}\n"
    pid = a.process.pid
    baseline = rss_bytes(pid)

    boundary = "inferd-test-boundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.jsonl\"\r\n"
            "Content-Type: application/jsonl\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def body() -> Iterator[bytes]:
        yield head
        yield from _big_file(size)
        yield tail

    with PeakRss(pid) as upload_memory:
        answer = httpx.post(a.v1 + "/files", headers={**auth(key), "content-type":
                            f"multipart/form-data; boundary={boundary}"}, content=body(), timeout=300)
    assert answer.status_code == 200, answer.text
    file_id = answer.json()["id"]
    assert answer.json()["bytes"] == size

    received = hashlib.sha256()
    count = 0
    with PeakRss(b.process.pid) as download_memory_b:
        download_baseline_b = download_memory_b.peak
        with httpx.stream("GET", f"{b.v1}/files/{file_id}/content", headers=auth(key), timeout=300) as stream:
            assert stream.status_code == 200
            assert int(stream.headers["content-length"]) == size
            for piece in stream.iter_bytes():
                received.update(piece)
                count += len(piece)
    assert count == size and received.hexdigest() == expected.hexdigest()
    growth_up = upload_memory.peak - baseline
    growth_down = download_memory_b.peak - download_baseline_b
    print(f"{deployment.store}: RSS growth upload {growth_up / MIB:.1f} MiB, download {growth_down / MIB:.1f} MiB")
    limit = 16 * MIB if deployment.store == "s3" else 8 * MIB  # S3: the transfer manager's 8 MiB parts
    assert growth_up < limit, f"upload grew RSS by {growth_up / MIB:.1f} MiB"
    assert growth_down < 8 * MIB, f"download grew RSS by {growth_down / MIB:.1f} MiB"
    assert deployment.local_files() == []
    assert httpx.delete(f"{a.v1}/files/{file_id}", headers=auth(key)).status_code == 200


def test_a_worker_killed_mid_batch_another_on_its_own_directory_finishes(deployment: Deployment) -> None:
    """The durability test on this backend: the worker is SIGKILLed mid-batch; a new worker on a
    directory of its own takes the batch over; every line lands once in the output or error file,
    read through either replica."""
    a, b = deployment.a, deployment.b
    key = a.create_key()
    lines, ok, engine_failed = _lines("d", 400)
    uploaded = upload(a, key, jsonl(lines))
    created = httpx.post(b.v1 + "/batches", headers=auth(key), timeout=30, json={
        "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    assert created.status_code == 200, created.text
    batch_id = created.json()["id"]
    deadline = time.monotonic() + 60
    while get(b, key, batch_id)["request_counts"]["completed"] < 60:
        assert time.monotonic() < deadline, deployment.worker.log_path.read_text()
        time.sleep(0.05)
    deployment.worker.kill()
    assert get(a, key, batch_id)["status"] == "in_progress"
    deployment.worker = Worker(a, data_dir=deployment.dirs[2].parent / f"worker-{uuid.uuid4().hex[:6]}")
    deployment.dirs.append(deployment.worker.data_dir)
    done = wait_for(a, key, batch_id, ("completed",), timeout=120)
    for replica in (a, b):
        _check_exactly_once(replica, key, done, lines, ok, engine_failed)
    assert deployment.local_files() == []

"""`inferd files migrate`: a PostgreSQL deployment's files kept in `<data dir>/files` move into the
database, resumably (interrupted at both unsafe moments, then run again) and idempotently (a third
run moves nothing), with contents unchanged and the local copies deleted (or kept with --keep-local)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import asyncpg
import httpx
import pytest

from tests.batches.conftest import BATCH_TOML, upload
from tests.harness import INFERD, Backend, Server, Upstream, auth, clean_env, own_backend, pg_drop_database, \
    write_config

COUNT = 12
LOCAL = '\n[storage]\nbackend = "local"\n'


@pytest.fixture()
def pg_backend(tmp_path: Path) -> Iterator[Backend]:
    if not os.environ.get("INFERD_DATABASE_URL", "").startswith("postgres"):
        pytest.skip("the migration moves files into PostgreSQL")
    backend, name = own_backend(tmp_path, "migrate")
    try:
        yield backend
    finally:
        assert name is not None
        pg_drop_database(os.environ["INFERD_DATABASE_URL"], name)


def migrate(backend: Backend, config: Path, data_dir: Path, *args: str) -> subprocess.Popen[str]:
    """`inferd files migrate` as an operator runs it on the machine holding `data_dir`."""
    env = clean_env({**backend.env(), "INFERD_CONFIG": str(config), "INFERD_DATA_DIR": str(data_dir)})
    return subprocess.Popen([INFERD, "files", "migrate", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out


def test_migrate_is_resumable_and_idempotent(tmp_path: Path, pg_backend: Backend, upstream: Upstream) -> None:
    # An older deployment: files in the data directory.
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    template = BATCH_TOML.replace("@WINDOW@", "600").replace("@RETENTION@", "600")
    local_config = write_config(tmp_path / "local.toml", template + LOCAL, upstream)
    store_config = write_config(tmp_path / "store.toml", template, upstream)  # the default: the database
    old = Server.start(old_dir, pg_backend, local_config)
    try:
        key = old.create_key()
        originals = {}
        for i in range(COUNT):
            data = (f'{{"n": {i}}}\n' * (2000 + i * 3000)).encode()
            originals[upload(old, key, data)["id"]] = data
    finally:
        old.stop()
    assert sorted(p.stem for p in (old_dir / "files").glob("*.jsonl")) == sorted(originals)
    ids = sorted(originals)
    blocked = ids[4]  # the fifth file the command takes (it goes in id order)

    async def interrupted() -> None:
        locker = await asyncpg.connect(pg_backend.database_url)
        watcher = await asyncpg.connect(pg_backend.database_url)
        try:
            # Hold the fifth file's row: the command copies its bytes, then waits to point the row at them.
            transaction = locker.transaction()
            await transaction.start()
            await locker.execute("SELECT 1 FROM files WHERE id = $1 FOR UPDATE", blocked)
            process = migrate(pg_backend, store_config, old_dir)
            deadline = time.monotonic() + 60
            while not await watcher.fetchval("SELECT count(*) FROM file_chunks WHERE file_id = $1", blocked):
                assert time.monotonic() < deadline and process.poll() is None, process.communicate()
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # it is now waiting for the row
            process.send_signal(signal.SIGKILL)
            process.communicate()
            await transaction.rollback()
            moved = await watcher.fetch("SELECT id FROM files WHERE path LIKE 'pg:%' ORDER BY id")
            assert [row["id"] for row in moved] == ids[:4]
        finally:
            await locker.close()
            await watcher.close()

    asyncio.run(interrupted())
    # Killed between a row's move and its local copy's deletion (files 1-4), and between a copy and
    # its row's move (file 5): both states a real interruption leaves.
    assert all((old_dir / "files" / f"{file_id}.jsonl").exists() for file_id in ids)

    first = finished(migrate(pg_backend, store_config, old_dir))
    assert first.startswith(f"moved {COUNT - 4} files"), first
    assert f"removed {COUNT} local copies" in first
    assert list((old_dir / "files").glob("*.jsonl")) == []
    again = finished(migrate(pg_backend, store_config, old_dir))
    assert again.startswith("moved 0 files (0 bytes); removed 0 local copies; 0 missing"), again

    async def chunk_rows() -> dict[str, Any]:
        conn = await asyncpg.connect(pg_backend.database_url)
        try:
            rows = await conn.fetch("SELECT file_id, count(*) AS n, sum(length(data)) AS size FROM file_chunks "
                                    "GROUP BY file_id")
            return {row["file_id"]: (row["n"], row["size"]) for row in rows}
        finally:
            await conn.close()

    chunks = asyncio.run(chunk_rows())
    assert {file_id: size for file_id, (_, size) in chunks.items()} == \
        {file_id: len(data) for file_id, data in originals.items()}  # the fifth's bytes once, not twice

    # A replica on a data directory of its own serves every file, byte for byte.
    new = Server.start(new_dir, pg_backend, store_config)
    try:
        for file_id, data in originals.items():
            got = httpx.get(f"{new.v1}/files/{file_id}/content", headers=auth(key), timeout=30)
            assert got.status_code == 200 and got.content == data
    finally:
        new.stop()


def test_keep_local_then_sweep(tmp_path: Path, pg_backend: Backend, upstream: Upstream) -> None:
    """--keep-local leaves the copies; a later run without it deletes them (their rows moved)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    template = BATCH_TOML.replace("@WINDOW@", "600").replace("@RETENTION@", "600")
    local_config = write_config(tmp_path / "local.toml", template + LOCAL, upstream)
    store_config = write_config(tmp_path / "store.toml", template, upstream)
    server = Server.start(data_dir, pg_backend, local_config)
    try:
        key = server.create_key()
        file_id = upload(server, key, b'{"a": 1}\n')["id"]
    finally:
        server.stop()
    kept = finished(migrate(pg_backend, store_config, data_dir, "--keep-local"))
    assert kept.startswith("moved 1 files") and "removed 0 local copies" in kept
    assert (data_dir / "files" / f"{file_id}.jsonl").exists()
    swept = finished(migrate(pg_backend, store_config, data_dir))
    assert swept.startswith("moved 0 files") and "removed 1 local copies" in swept
    assert not (data_dir / "files" / f"{file_id}.jsonl").exists()
    refused = migrate(pg_backend, local_config, data_dir)
    _, err = refused.communicate(timeout=60)
    assert refused.returncode != 0 and "nothing to move to" in err

"""The `[storage]` table is checked when the configuration is read, and a server refuses to start
on a backend its database cannot hold."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inferd.config import load_catalogue
from inferd.config_storage import StorageConfig
from inferd.errors import ConfigError
from tests.harness import INFERD, Backend, clean_env

ENGINES = {"openai": ()}


def _load(tmp_path: Path, table: str) -> StorageConfig:
    path = tmp_path / "inferd.toml"
    path.write_text(f"[storage]\n{table}\n", encoding="utf-8")
    return load_catalogue(path, ENGINES).storage


def test_defaults_and_values(tmp_path: Path) -> None:
    assert _load(tmp_path, "") == StorageConfig(backend=None)
    assert _load(tmp_path, 'backend = "postgres"') == StorageConfig(backend="postgres")
    loaded = _load(tmp_path, 'backend = "s3"\nbucket = "b"\nprefix = "/prod"\nendpoint_url = "http://minio:9000"\n'
                             'region = "eu-west-1"')
    assert loaded == StorageConfig(backend="s3", bucket="b", prefix="prod/", endpoint_url="http://minio:9000",
                                   region="eu-west-1")


@pytest.mark.parametrize("table, message", [
    ('backend = "disk"', "backend"),
    ('backend = "s3"', "bucket"),
    ('backend = "s3"\nbucket = ""', "bucket"),
    ('backend = "local"\nbucket = "b"', "bucket"),
    ('backend = "s3"\nbucket = "b"\nendpoint_url = "minio:9000"', "endpoint_url"),
    ('backend = "s3"\nbucket = "b"\naccess_key = "k"', "access_key"),
    ("backend = 3", "backend"),
])
def test_wrong_values_fail_at_start(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError) as failure:
        _load(tmp_path, table)
    assert "[storage]" in str(failure.value) and message in str(failure.value)


def test_postgres_backend_on_sqlite_is_refused(tmp_path: Path, backend: Backend) -> None:
    if backend.database_url.startswith("postgresql"):
        pytest.skip("the refusal is SQLite's")
    config = tmp_path / "inferd.toml"
    config.write_text('[storage]\nbackend = "postgres"\n', encoding="utf-8")
    env = clean_env({"INFERD_DATABASE_URL": f"sqlite:///{tmp_path / 'inferd.db'}"})
    for command in (["batch-worker"], ["serve", "--port", "1"]):
        done = subprocess.run([INFERD, *command, "--config", str(config), "--data-dir", str(tmp_path)],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and "needs a PostgreSQL database" in done.stderr, (command, done.stderr)

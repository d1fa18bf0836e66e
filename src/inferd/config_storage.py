"""The `[storage]` table: where the bytes of stored files (batch inputs, outputs, error files) live.

```toml
[storage]
backend = "s3"                       # "local", "postgres" or "s3"; default: postgres on a
                                     # PostgreSQL database, local on SQLite
bucket = "inferd-files"              # s3: required
prefix = "prod/"                     # s3: the start of every object key (default "")
endpoint_url = "http://minio:9000"   # s3: another S3-compatible service (MinIO...); default AWS
region = "eu-west-1"                 # s3: default from the AWS_* environment
```

`local` keeps the bytes in `<data dir>/files`, which every process that reads or writes files must
then share; `postgres` keeps them in the database in 1 MiB chunks; `s3` in a bucket, with the
credentials of the standard AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE,
an instance role...), read by the S3 client itself.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable
from urllib.parse import urlsplit

from inferd.errors import ConfigError

TABLE = "[storage]"
BACKENDS = ("local", "postgres", "s3")

# Builds the error naming the file, the table and the key (config.py `_Where.fail`).
Fail = Callable[[str, str | None, str], ConfigError]


@dataclass(frozen=True)
class StorageConfig:
    """The file backend; `backend` None: the database's default (postgres on PostgreSQL, else local)."""

    backend: str | None = None
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None


def parse_storage(fail: Fail, raw: Any) -> StorageConfig:
    """The checked `[storage]` table; ConfigError naming the key otherwise."""
    if not isinstance(raw, dict):
        raise fail(TABLE, None, "expected a table")
    known = [f.name for f in fields(StorageConfig)]
    for key, value in raw.items():
        if key not in known:
            raise fail(TABLE, key, f"unknown key (known: {', '.join(known)})")
        if not isinstance(value, str):
            raise fail(TABLE, key, "expected a string")
    backend = raw.get("backend")
    if backend is not None and backend not in BACKENDS:
        raise fail(TABLE, "backend", f"expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend != "s3":
        for key in ("bucket", "prefix", "endpoint_url", "region"):
            if key in raw:
                raise fail(TABLE, key, 'only with backend = "s3"')
        return StorageConfig(backend=backend)
    bucket = raw.get("bucket")
    if not bucket:
        raise fail(TABLE, "bucket", 'required with backend = "s3"')
    prefix = raw.get("prefix", "").lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"  # a folder of the bucket, so `prod` never matches `production/...`
    endpoint = raw.get("endpoint_url") or None
    if endpoint is not None:
        url = urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise fail(TABLE, "endpoint_url", "expected an http:// or https:// URL")
    return StorageConfig(backend="s3", bucket=bucket, prefix=prefix, endpoint_url=endpoint,
                         region=raw.get("region") or None)


def storage_backend(config: StorageConfig, on_postgres: bool) -> str:
    """The backend in use: the one named, else postgres on PostgreSQL and local on SQLite;
    ConfigError for postgres on SQLite (checked at start, before anything is served)."""
    backend = config.backend or ("postgres" if on_postgres else "local")
    if backend == "postgres" and not on_postgres:
        raise ConfigError(f'{TABLE}: backend = "postgres" needs a PostgreSQL database (INFERD_DATABASE_URL)')
    return backend

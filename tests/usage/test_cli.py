"""`inferd usage`: the operators' summary table, read from the database with the report code."""

from __future__ import annotations

import re
import subprocess
import uuid
from datetime import datetime

from tests.harness import INFERD, Server, clean_env
from tests.usage.conftest import store_rows, usage_row


def inferd_usage(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env({**server.backend.env(), "INFERD_CONFIG": str(server.config),
                     "INFERD_DATA_DIR": str(server.data_dir), "COLUMNS": "160"})
    return subprocess.run([INFERD, "usage", *args], capture_output=True, text=True, env=env, timeout=60)


def cells(output: str, first: str) -> list[str]:
    """The cells of the table line whose first cell is `first`."""
    for line in output.splitlines():
        parts = [p.strip() for p in re.split(r"[│┃|]", line) if p.strip()]
        if parts and parts[0] == first:
            return parts
    raise AssertionError(f"no row {first!r} in:\n{output}")


def test_usage_of_a_key_by_model_and_day(server: Server, app_key: str) -> None:
    store_rows(server, [usage_row(app_key, datetime(2025, 5, 1, 10), model="m-big", prompt=1000, completion=500,
                                  cost=1.5),
                        usage_row(app_key, datetime(2025, 5, 2, 11), model="m-big", prompt=200, completion=0,
                                  cost=0.25),
                        usage_row(app_key, datetime(2025, 5, 2, 12), model="m-small", prompt=30, completion=3,
                                  cost=0.001, metadata={"env": "prod"})])
    key_id = app_key.split(":")[0]
    result = inferd_usage(server, "--key", key_id, "--from", "2025-05-01", "--to", "2025-06-01")
    assert result.returncode == 0, result.stderr
    assert f"key {key_id}" in result.stdout and "by model" in result.stdout
    assert cells(result.stdout, "m-big") == ["m-big", "2", "1,200", "0", "500", "1,700", "1.750000"]
    assert cells(result.stdout, "m-small")[1:3] == ["1", "30"]
    assert cells(result.stdout, "total")[1] == "3"
    assert result.stdout.index("m-big") < result.stdout.index("m-small")  # by cost
    days = inferd_usage(server, "--key", key_id, "--group-by", "day", "--from", "2025-05-01T00:00:00Z",
                        "--to", "2025-05-02T11:30:00Z")
    assert days.returncode == 0, days.stderr
    assert cells(days.stdout, "2025-05-01")[1] == "1" and cells(days.stdout, "2025-05-02")[1] == "1"
    tags = inferd_usage(server, "--key", key_id, "--group-by", "metadata.env", "--from", "2025-05-01",
                        "--to", "2025-06-01")
    assert cells(tags.stdout, "prod")[1] == "1" and cells(tags.stdout, "(none)")[1] == "2"


def test_usage_of_an_org_by_key(server: Server) -> None:
    org = f"cli-usage-{uuid.uuid4().hex[:6]}"
    first, second = server.create_key(org=org), server.create_key(org=org)
    outsider = server.create_key()
    store_rows(server, [usage_row(first, datetime(2025, 7, 1, 9), cost=0.5),
                        usage_row(second, datetime(2025, 7, 1, 9), cost=0.2),
                        usage_row(second, datetime(2025, 7, 3, 9), cost=0.2),
                        usage_row(outsider, datetime(2025, 7, 1, 9), cost=9.0)])
    result = inferd_usage(server, "--org", org, "--group-by", "key_id", "--from", "2025-07-01", "--to", "2025-08-01")
    assert result.returncode == 0, result.stderr
    assert cells(result.stdout, first.split(":")[0])[1] == "1"
    assert cells(result.stdout, second.split(":")[0])[1] == "2"
    assert outsider.split(":")[0] not in result.stdout
    assert cells(result.stdout, "total")[1] == "3"


def test_usage_refuses_bad_arguments(server: Server, app_key: str) -> None:
    key_id = app_key.split(":")[0]
    for args in ((), ("--key", key_id, "--org", "x"), ("--key", key_id, "--group-by", "colour"),
                 ("--key", key_id, "--from", "last week"), ("--key", key_id, "--from", "2025-02-01", "--to", "2025-01-01"),
                 ("--org", f"no-such-org-{uuid.uuid4().hex[:6]}")):
        result = inferd_usage(server, *args)
        assert result.returncode != 0 and result.stderr.strip(), args

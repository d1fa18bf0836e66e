"""The `[batches]` table is type-checked when the configuration is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.config import BatchConfig, load_catalogue
from inferd.errors import ConfigError

ENGINES = {"openai": ()}


def _load(tmp_path: Path, table: str) -> BatchConfig:
    path = tmp_path / "inferd.toml"
    path.write_text(f"[batches]\n{table}\n", encoding="utf-8")
    return load_catalogue(path, ENGINES).batches


def test_defaults_and_values(tmp_path: Path) -> None:
    assert _load(tmp_path, "") == BatchConfig(window_seconds=86400.0, retention_seconds=2505600.0, max_concurrency=8)
    loaded = _load(tmp_path, "window_seconds = 5\nretention_seconds = 0.5\nmax_concurrency = 2")
    assert loaded == BatchConfig(window_seconds=5.0, retention_seconds=0.5, max_concurrency=2)


@pytest.mark.parametrize("table, message", [
    ('window_seconds = "1d"', "window_seconds"),
    ("retention_seconds = 0", "retention_seconds"),
    ("max_concurrency = 1.5", "max_concurrency"),
    ("max_concurrency = 0", "max_concurrency"),
    ("max_concurrency = true", "max_concurrency"),
    ("rpm = 5", "rpm"),
])
def test_wrong_values_fail_at_start(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError) as failure:
        _load(tmp_path, table)
    assert "[batches]" in str(failure.value) and message in str(failure.value)

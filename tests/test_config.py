"""A wrong configuration fails at start with a message naming the file, the table and the key."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inferd.config import load_catalogue
from inferd.engines.registry import default_registry
from inferd.errors import ConfigError
from tests.harness import INFERD, clean_env

GOOD = '[[models]]\nid = "m"\nbase_url = "http://127.0.0.1:1/v1"\n'


CASES = [
    (GOOD + 'context_length = "big"\n', ["[[models]] #1 (id 'm')", "context_length", "expected int"]),
    (GOOD + 'colour = "blue"\n', ["[[models]] #1 (id 'm')", "colour", "unknown key"]),
    (GOOD + 'engine = "warp"\n', ["engine", "unknown engine 'warp'"]),
    (GOOD + 'type = "hologram"\n', ["type", "unknown model type"]),
    (GOOD + 'thinking = "sometimes"\n', ["thinking"]),
    (GOOD + 'capabilities = ["telepathy"]\n', ["capabilities", "telepathy"]),
    (GOOD + 'cost = { input_per_m_token = "free" }\n', ["cost", "input_per_m_token"]),
    (GOOD + 'tokenizer = "magic"\n', ["tokenizer"]),
    (GOOD + 'tokenizer = "hf:no/such/dir"\n', ["tokenizer", "no tokenizer.json"]),
    (GOOD + '[[models]]\nid = "n"\nbase_url = "http://x/v1"\naliases = ["m"]\n', ["aliases", "'m'"]),
    ('[[models]]\nbase_url = "http://x/v1"\n', ["[[models]] #1", "'id'", "missing"]),
    ('[idp]\nissuer = 5\n', ["[idp]", "issuer"]),
    ('[unknown]\nx = 1\n', ["[unknown]", "unknown table"]),
    ('[[models]\nid = ', ["not valid TOML"]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_bad_config_is_explained(tmp_path: Path, text: str, expected: list[str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_catalogue(config, default_registry().option_keys())
    message = str(caught.value)
    assert message.startswith(str(config))
    for fragment in expected:
        assert fragment in message, message


@pytest.mark.parametrize(("text", "expected"), CASES[:2])
def test_bad_config_fails_at_start(tmp_path: Path, text: str, expected: list[str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    result = subprocess.run([INFERD, "serve", "--config", str(config), "--data-dir", str(tmp_path / "d"),
                             "--port", "1"], capture_output=True, text=True, env=clean_env({}), timeout=60)
    assert result.returncode != 0
    assert str(config) in result.stderr
    for fragment in expected:
        assert fragment in result.stderr, result.stderr


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    result = subprocess.run([INFERD, "serve", "--config", str(missing), "--data-dir", str(tmp_path / "d")],
                            capture_output=True, text=True, env=clean_env({}), timeout=60)
    assert result.returncode != 0 and str(missing) in result.stderr and "not found" in result.stderr

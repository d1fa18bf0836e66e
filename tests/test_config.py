"""A wrong configuration fails at start with a message naming the file, the table and the key."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from inferd.config import load_catalogue
from inferd.engines.registry import default_registry
from inferd.errors import ConfigError
from tests.harness import INFERD, clean_env

GOOD = '[[models]]\nid = "m"\nbase_url = "http://127.0.0.1:1/v1"\n'
# An [idp] table without an audience: tokens could not be told apart from another service's.
NO_AUDIENCE = ('[idp]\nissuer = "https://idp"\njwks_file = "jwks.json"\n', ["[idp], key 'audience'", "missing"])

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
    ('[idp]\naudience = "inferd"\nhs256_secret = "s"\n', ["[idp], key 'issuer'", "missing"]),
    NO_AUDIENCE,
    ('[idp]\nissuer = ""\naudience = "inferd"\nhs256_secret = "s"\n', ["[idp], key 'issuer'", "missing"]),
    ('[idp]\nissuer = "https://idp"\naudience = "inferd"\n', ["[idp], key 'hs256_secret'", "jwks_file"]),
    (GOOD + '[[models]]\nid = "m"\nbase_url = "http://x/v1"\n', ["(id 'm'), key 'id'", "'m'"]),
    ('[[models]]\nid = "qwen2.5-coder-0.5b-instruct"\nbuiltin = true\naliases = ["fast"]\n' + GOOD
     + 'aliases = ["fast"]\n', ["(id 'm'), key 'aliases'", "'fast' already names model"]),
    ('[limits]\nbody_timeout = 5\n', ["[limits], key 'body_timeout'", "unknown key (known: body_timeout_s)"]),
    ('[metrics]\nenabled = "no"\n' + GOOD, ["[metrics], key 'enabled'", "expected bool"]),
    ('[metrics]\nport = 9\n' + GOOD, ["[metrics], key 'port'", "unknown key (known: enabled)"]),
    ('[logging]\nformat = "xml"\n' + GOOD, ["[logging], key 'format'", "text, json"]),
    ('[logging]\nlevel = "debug"\n' + GOOD, ["[logging], key 'level'", "unknown key (known: format)"]),
    ('[limits]\nbody_timeout_s = 0\n', ["[limits], key 'body_timeout_s'", "must be positive"]),
    ('[limits]\nbody_timeout_s = "30"\n', ["[limits], key 'body_timeout_s'", "expected int or float"]),
    ('limits = 30\n', ["[limits]", "expected a table"]),
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


@pytest.mark.parametrize(("text", "expected"), [*CASES[:2], NO_AUDIENCE])
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


BUILTIN_QWEN = '[[models]]\nid = "qwen2.5-coder-0.5b-instruct"\nbuiltin = true\n'


def _load(tmp_path: Path, text: str) -> dict[str, tuple[str, ...]]:
    config = tmp_path / "inferd.toml"
    config.write_text(text)
    return {m.id: m.aliases for m in load_catalogue(config, default_registry().option_keys()).models}


def test_configured_alias_wins_over_a_builtin_default_alias(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="inferd.catalogue"):
        aliases = _load(tmp_path, BUILTIN_QWEN + GOOD + 'aliases = ["fast", "quick"]\n')
    assert aliases == {"qwen2.5-coder-0.5b-instruct": ("chat",), "m": ("fast", "quick")}
    [record] = [r for r in caplog.records if r.name == "inferd.catalogue"]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "'fast'" in message and "'qwen2.5-coder-0.5b-instruct'" in message and "'m'" in message
    assert str(tmp_path / "inferd.toml") in message


def test_configured_id_wins_over_a_builtin_default_alias(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="inferd.catalogue"):
        aliases = _load(tmp_path, GOOD.replace('"m"', '"chat"') + BUILTIN_QWEN)
    assert aliases == {"chat": (), "qwen2.5-coder-0.5b-instruct": ("fast",)}
    assert ["'chat'" in r.getMessage() for r in caplog.records if r.name == "inferd.catalogue"] == [True]


def test_builtin_keeps_its_aliases_when_nothing_takes_them(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="inferd.catalogue"):
        aliases = _load(tmp_path, BUILTIN_QWEN + GOOD + 'aliases = ["quick"]\n')
    assert aliases == {"qwen2.5-coder-0.5b-instruct": ("fast", "chat"), "m": ("quick",)}
    assert [r for r in caplog.records if r.name == "inferd.catalogue"] == []


def _image(model_id: str, extra: str = "") -> str:
    return f'[[models]]\nid = "{model_id}"\ntype = "image-gen"\nbase_url = "http://127.0.0.1:1/v1"\n{extra}\n'


def test_t2i_goes_to_the_first_image_model_unless_a_model_takes_it(tmp_path: Path) -> None:
    assert _load(tmp_path, GOOD + _image("a") + _image("b")) == {"m": (), "a": ("t2i",), "b": ()}
    assert _load(tmp_path, GOOD + _image("a") + _image("b", 'aliases = ["t2i"]')) == {"m": (), "a": (), "b": ("t2i",)}
    assert _load(tmp_path, GOOD.replace('"m"', '"t2i"') + _image("a")) == {"t2i": (), "a": ()}
    assert _load(tmp_path, GOOD) == {"m": ()}


def test_a_thinking_model_shows_the_reasoning_effort_capability(tmp_path: Path) -> None:
    config = tmp_path / "inferd.toml"
    config.write_text(GOOD + 'thinking = "hybrid"\ncapabilities = ["tools"]\n' + GOOD.replace('"m"', '"n"')
                      + 'thinking = "never"\n')
    models = {m.id: m for m in load_catalogue(config, default_registry().option_keys()).models}
    assert models["m"].capabilities == ("tools", "reasoning_effort") and models["m"].thinking == "hybrid"
    assert models["n"].capabilities == () and models["n"].thinking == "never"

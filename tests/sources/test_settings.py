"""`[conversations]` values are type-checked when the configuration is read; the purge interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.config import load_catalogue
from inferd.engines.registry import default_registry
from inferd.errors import ConfigError
from inferd.services.purge import check_interval


@pytest.mark.parametrize(("table", "expected"), [
    ('embedding_model = 5', "key 'embedding_model': expected str"),
    ('ephemeral_ttl_seconds = "soon"', "key 'ephemeral_ttl_seconds': expected int or float"),
    ('ephemeral_ttl_seconds = 0', "key 'ephemeral_ttl_seconds': must be positive"),
    ('max_tool_steps = true', "key 'max_tool_steps': expected int"),
    ('embeding_model = "x"', "key 'embeding_model': unknown key"),
    ('retrieval_top_k = 0', "key 'retrieval_top_k': must be positive"),
    ('retrieval_top_k = 21', "key 'retrieval_top_k': must be at most 20"),
    ('retrieval_tokens = 1.5', "key 'retrieval_tokens': expected int"),
    ('retrieval_tokens = -3', "key 'retrieval_tokens': must be positive"),
])
def test_bad_conversation_settings_fail_with_the_key_named(tmp_path: Path, table: str, expected: str) -> None:
    config = tmp_path / "inferd.toml"
    config.write_text(f"[conversations]\n{table}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as failed:
        load_catalogue(config, default_registry().option_keys())
    assert "[conversations]" in str(failed.value) and expected in str(failed.value)


def test_good_conversation_settings_are_kept(tmp_path: Path) -> None:
    config = tmp_path / "inferd.toml"
    config.write_text('[conversations]\nembedding_model = "embed"\nephemeral_ttl_seconds = 2.5\nretrieval_top_k = 20\n'
                      'retrieval_tokens = 900\n', encoding="utf-8")
    settings = load_catalogue(config, default_registry().option_keys()).conversations
    assert settings == {"embedding_model": "embed", "ephemeral_ttl_seconds": 2.5, "retrieval_top_k": 20,
                        "retrieval_tokens": 900}


def test_the_purge_checks_at_least_every_min_of_60_and_a_fifth_of_the_ttl() -> None:
    assert check_interval(86400) == 60 and check_interval(100) == 20 and check_interval(3) == pytest.approx(0.6)

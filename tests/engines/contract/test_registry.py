"""Every registered engine is under contract: a new engine that lists no factory here fails."""

from __future__ import annotations

from inferd.engines.registry import default_registry
from tests.engines.contract.engines import ENGINES


def test_every_registered_engine_is_under_contract() -> None:
    contracted = {name for factories in ENGINES.values() for name in factories}
    assert set(default_registry().option_keys()) == contracted

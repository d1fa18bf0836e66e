"""Per-model windows hold on every metered route: a key's own rpm on the
model a route calls refuses the next call to that model, whatever the route."""

from __future__ import annotations

import pytest

from tests.harness import Server
from tests.limits.governance import set_key
from tests.limits.test_governance import ROUTES


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_key_window_on_the_model_a_route_calls_holds(server: Server, route: str) -> None:
    call, model = ROUTES[route]
    key = server.create_key()
    set_key(server, key, model_limits={model: {"rpm": 1}})
    first = call(server, key)
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    second = call(server, key)
    assert second.status_code == 429, second.text
    assert 1 <= int(second.headers["Retry-After"]) <= 60
    assert len(server.usage_rows(key)) == 1  # the refused call reached no engine

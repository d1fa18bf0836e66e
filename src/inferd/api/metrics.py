"""GET /metrics: the Prometheus text exposition, without a key.

Mounted only when `[metrics] enabled` (the default); turned off, the path is an unknown route
(404). Under `--workers N` the worker that answers sums the series of all of them.
"""

from __future__ import annotations

from typing import Callable, Iterable

from inferd.api.asgi import Receive, Scope, Send, send_bytes, send_error
from inferd.catalogue import Model
from inferd.errors import MethodNotAllowed
from inferd.observe.metrics import CONTENT_TYPE, Metrics


class MetricsRoute:
    """Copies the live state (pools, the usage writer's queue) into the series, then renders them."""

    def __init__(self, metrics: Metrics, models: Callable[[], Iterable[Model]], pending_rows: Callable[[], int]
                 ) -> None:
        self._metrics = metrics
        self._models = models
        self._pending_rows = pending_rows
        self._headers = [(b"content-type", CONTENT_TYPE.encode()), (b"cache-control", b"no-store")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await send_error(send, MethodNotAllowed(f"Method {scope['method']} not allowed on /metrics"))
            return
        self._metrics.copy_state(self._models(), self._pending_rows())
        body = self._metrics.render()
        await send_bytes(send, 200, b"" if scope["method"] == "HEAD" else body, self._headers)

"""Active health: for every model with `health_path`, a GET on each
deployment's origin (`base_url` without its path) + `health_path` every `health_interval_s`.
A 2xx ends a cooldown at once (a restarted engine takes traffic again without waiting for its
cooldown to run out); anything else starts or extends one, so calls stop being tried there before
one of them fails.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import aiohttp

from inferd.catalogue import Model, ModelCatalogue

log = logging.getLogger("inferd.health")

PROBE_TIMEOUT_S = 2.0


def probe_url(base_url: str, path: str) -> str:
    """The origin of `base_url` with `path`: http://10.0.0.1:8000/v1 + /health -> http://10.0.0.1:8000/health."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}{path}"


class HealthProber:
    """One task per probed model, started with the app and stopped with it."""

    def __init__(self, catalogue: ModelCatalogue) -> None:
        self._models = [m for m in catalogue.models if m.config.health_path]
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        """Start probing (nothing to do when no model has `health_path`)."""
        if not self._models:
            return
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S))
        self._tasks = [asyncio.create_task(self._watch(model), name=f"health-{model.id}") for model in self._models]

    async def _watch(self, model: Model) -> None:
        path = model.config.health_path or "/health"
        while True:
            await asyncio.gather(*(self._probe(model, index, path) for index in range(len(model.deployments))))
            await asyncio.sleep(model.config.health_interval_s)

    async def _probe(self, model: Model, index: int, path: str) -> None:
        deployment = model.deployments[index]
        if not deployment.config.base_url or self._session is None:
            return
        url = probe_url(deployment.config.base_url, path)
        try:
            async with self._session.get(url) as response:
                healthy = 200 <= response.status < 300
                reason = "status_429" if response.status == 429 else "status_5xx"
        except asyncio.TimeoutError:
            healthy, reason = False, "timeout"
        except aiohttp.ClientError:
            healthy, reason = False, "connect"
        if healthy:
            if not model.pool.healthy(index):
                log.info("deployment %s of model %s is up again (health probe)", deployment.name, model.id)
            model.pool.succeeded(index)
        else:
            model.pool.probe_failed(index, reason)

    async def close(self) -> None:
        """Stop the probes."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

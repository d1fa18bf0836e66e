"""create_app(settings): builds every service, mounts the routes, maps errors to the wire once."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from inferd import __version__
from inferd.api import admin as admin_routes
from inferd.api import audio as audio_routes
from inferd.api import batches as batches_routes
from inferd.api import files as files_routes
from inferd.api import auth as auth_routes
from inferd.api import conversations as conversation_routes
from inferd.api import console as console_routes
from inferd.api import docs as docs_routes
from inferd.api import images as images_routes
from inferd.api import me as me_routes
from inferd.api import sources as sources_routes
from inferd.api import vectorize as vectorize_routes
from inferd.api import models as models_routes
from inferd.api import responses as responses_routes
from inferd.api import usage as usage_routes
from inferd.api.asgi import Receive, Scope, Send, error_body
from inferd.api.body_limits import Authenticate, BodyClock, BodyLimits
from inferd.api.chat import ChatCompletionsRoute
from inferd.api.embeddings import EmbeddingsRoute
from inferd.api.messages import MessagesCountTokensRoute, MessagesRoute
from inferd.api.metrics import MetricsRoute
from inferd.api.rerank import RerankRoute
from inferd.api.responses import ResponsesRoute
from inferd.api.tokens import CountTokensRoute
from inferd.config import Settings
from inferd.errors import InferdError, InvalidRequest, MethodNotAllowed, NotFound, refused_text
from inferd.observe.logs import AccessLog, configure_logging
from inferd.observe.metrics import worker_exited
from inferd.observe.requests import RequestIds, RequestNote, current, note_request, stamped
from inferd.services.purge import start_key_sweep
from inferd.services.alerts import start_alerts
from inferd.services.sources import start_purge
from inferd.wiring import Services, build_services
from inferd.worker.runner import worker_for

if TYPE_CHECKING:
    from inferd.tracing.spans import Tracing

GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)
log = logging.getLogger("inferd")


def _error_response(exc: InferdError, path: str = "") -> Response:
    media_type = getattr(exc, "content_type", "application/json")
    return Response(error_body(exc, path), status_code=exc.status, headers=exc.headers, media_type=media_type)


def _install_error_handlers(api: FastAPI) -> None:
    """Every error on a /v1 route leaves in the envelope, framework errors included."""

    @api.exception_handler(InferdError)
    async def inferd_error(request: Request, exc: InferdError) -> Response:
        return _error_response(exc, request.url.path)

    @api.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        if first.get("type") == "json_invalid":
            return _error_response(InvalidRequest(f"Malformed JSON body: {first.get('msg', '')}",
                                                  code="invalid_json"), request.url.path)
        return _error_response(InvalidRequest(f"{where}: {first.get('msg', 'invalid')}", param=where),
                               request.url.path)

    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return _error_response(NotFound(f"No route {request.method} {request.url.path}", code="unknown_route"),
                                   request.url.path)
        if exc.status_code == 405:
            return _error_response(MethodNotAllowed(f"Method {request.method} not allowed on {request.url.path}"),
                                   request.url.path)
        error = InferdError(str(exc.detail))
        error.status = exc.status_code
        error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return _error_response(error, request.url.path)

    @api.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error_response(InferdError("Internal server error"), request.url.path)

    @api.exception_handler(DBAPIError)
    async def database_error(request: Request, exc: DBAPIError) -> Response:
        refused = refused_text(exc)  # a client's NUL character, which PostgreSQL cannot hold: 400
        return await unexpected(request, exc) if refused is None else _error_response(refused, request.url.path)


class InferdApp:
    """The ASGI application: hot routes as raw handlers, everything else through FastAPI."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.services: Services | None = None
        self._hot: dict[str, Any] = {}
        self._tracing: Tracing | None = None  # `[tracing]`: a server span per /v1/ request; None: off
        # /docs and /redoc are api/docs.py's: FastAPI's own load their scripts from a CDN.
        self.api = FastAPI(title="inferd", version="1.0.0", lifespan=self._lifespan,
                           description=f"Self-hosted inference API (inferd {__version__})",
                           docs_url=None, redoc_url=None, swagger_ui_oauth2_redirect_url=None)
        _install_error_handlers(self.api)
        self.api.include_router(models_routes.router)
        self.api.include_router(me_routes.router)
        self.api.include_router(audio_routes.router)
        self.api.include_router(images_routes.router)
        self.api.include_router(files_routes.router)
        self.api.include_router(batches_routes.router)
        self.api.include_router(usage_routes.router)
        self.api.include_router(docs_routes.router)
        self.api.include_router(auth_routes.router)
        self.api.include_router(conversation_routes.router)
        self.api.include_router(sources_routes.router)
        self.api.include_router(vectorize_routes.router)
        self.api.include_router(console_routes.router)
        self.api.include_router(admin_routes.router)
        self.api.include_router(responses_routes.router)
        self.api.openapi = lambda: docs_routes.openapi_document(self.api)  # type: ignore[method-assign]
        self._ids = RequestIds()
        self._access_log: AccessLog | None = None
        self._body_clock = BodyClock()
        self._cold = BodyLimits(self.api, self.api.router.routes, self._authenticator, self._body_clock)

    def _authenticator(self) -> Authenticate | None:
        return self.services.auth.authenticate if self.services is not None else None

    @asynccontextmanager
    async def _lifespan(self, api: FastAPI) -> AsyncIterator[None]:
        services = await build_services(self.settings)
        log_format = self.settings.log_format or services.config.observe.log_format
        configure_logging(log_format)
        self.services = api.state.services = services
        self._metrics = services.metrics
        self._access_log = AccessLog() if log_format == "json" else None
        self._hot = {
            "/v1/chat/completions": ChatCompletionsRoute(services.auth, services.limits, services.chat),
            "/v1/chat/count_tokens": CountTokensRoute(services.auth, services.limits, services.chat),
            "/v1/embeddings": EmbeddingsRoute(services.auth, services.limits, services.embeddings),
            "/v1/rerank": RerankRoute(services.auth, services.limits, services.rerank),
            "/v1/messages": MessagesRoute(services.auth, services.limits, services.chat, services.catalogue),
            "/v1/messages/count_tokens": MessagesCountTokensRoute(services.auth, services.limits, services.chat),
            "/v1/responses": ResponsesRoute(services.auth, services.limits, services.chat, services.catalogue,
                                            services.responses),
        }
        if services.config.observe.metrics_enabled:
            self._hot["/metrics"] = MetricsRoute(services.metrics, lambda: services.catalogue.models,
                                                 lambda: services.writer.pending)
        # Under --workers each worker copies its pools' state into the shared files once a second.
        state_copier = (asyncio.get_running_loop().create_task(_copy_state_forever(services))
                        if services.metrics.multiprocess else None)
        self._body_clock.grace_s = services.config.limits.body_timeout_s
        self._body_clock.start()
        self._tracing = services.tracing
        for route in self._hot.values():
            route.body_clock = self._body_clock
            route.tracing = services.tracing
        batch_worker = worker_for(services) if self.settings.batch_worker else None
        if batch_worker is not None:
            batch_worker.start()
        purge = start_purge(services.conversations, services.config.conversations)
        retention = services.responses.start_retention()
        key_sweep = start_key_sweep(services.keys)
        alerts = start_alerts(services.db, services.config.alerts, services.metrics)  # None without [alerts]
        # Everything built so far (modules, the catalogue, engines, SQLAlchemy's tables) lives as long
        # as the process. Frozen, the cycle collector stops walking it: a full collection went from
        # about 100 ms (200,000 objects, a pause every request in flight waited out: the p99 at
        # concurrency 64) to the objects made since. A young collection walks the objects of the
        # requests in flight whatever the threshold, so collecting ten times less often costs ten
        # times less; the cyclic garbage of a request waits a little longer to be freed.
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        try:
            yield
        finally:
            if state_copier is not None:
                state_copier.cancel()
                worker_exited(os.getpid())
            self._hot = {}
            await self._body_clock.close()
            await purge.close()
            await retention.close()
            await key_sweep.close()
            if alerts is not None:
                await alerts.close()
            if batch_worker is not None:
                await batch_worker.stop()
            await services.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.services is None:
            await self._cold(scope, receive, send)
            return
        note = note_request(scope, self._ids)
        token = current.set(note)
        if self._tracing is not None:
            self._tracing.begin(scope, note)
        route = self._hot.get(scope["path"])
        try:
            if route is not None:  # starts its responses with observe.requests.response_start
                await route(scope, receive, send)
            else:
                await self._cold(scope, receive, stamped(send, note))
        except BaseException:
            if not note.status:
                note.status = 500
            raise
        finally:
            current.reset(token)
            self._finished(scope, note, scope["path"] if route is not None else self._template(scope))

    def _finished(self, scope: Scope, note: RequestNote, route: str) -> None:
        """Count the request and write its access log line."""
        now = time.perf_counter()
        if not note.status:
            note.status = 499  # the client left before a response started
        if note.rejection is not None:
            self._metrics.rejected(note.rejection)
        self._metrics.request(route, note.model, note.status, now - note.started)
        if self._access_log is not None:
            self._access_log.write(scope["method"], route, note, now)
        if note.trace is not None:
            self._tracing.end(note, route)  # type: ignore[union-attr]  # set when tracing is on

    def _template(self, scope: Scope) -> str:
        """The path template of the FastAPI route that answered ("" for an unknown route)."""
        route = scope.get("route")
        if route is not None:
            return str(route.path)
        partial = ""
        for candidate in self.api.router.routes:  # refused before routing (401, 413): find it
            match, _ = candidate.matches(scope)
            if match is Match.FULL:
                return str(getattr(candidate, "path", ""))
            if match is Match.PARTIAL and not partial:
                partial = str(getattr(candidate, "path", ""))
        return partial


async def _copy_state_forever(services: Services) -> None:
    while True:
        services.metrics.copy_state(services.catalogue.models, services.writer.pending)
        await asyncio.sleep(1.0)


def create_app(settings: Settings | None = None) -> InferdApp:
    """Build the application for these settings (the environment's by default)."""
    return InferdApp(settings or Settings.from_env())

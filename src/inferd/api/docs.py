"""The API's documentation pages, /docs (Swagger UI) and /redoc (ReDoc), served with their scripts
from this server alone; the OpenAPI entries of the raw-ASGI hot routes (the dispatcher in app.py
answers those paths before FastAPI sees them: the stubs exist so /openapi.json documents their
schemas and errors); and the document's errors as the server answers them (`openapi_document`)."""

from __future__ import annotations

import importlib.util
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, HTMLResponse, Response
from pydantic import BaseModel

from inferd.api.asgi import USER_SCOPED_PREFIXES
from inferd.errors import NotFound, ServiceUnavailable
from inferd.protocol.chat import (ChatCompletionRequest, ChatCompletionResponse, CountTokensRequest,
                                  CountTokensResponse)
from inferd.protocol.embeddings import EmbeddingRequest, EmbeddingResponse
from inferd.protocol.errors import APIErrorEnvelope, AppErrorEnvelope
from inferd.protocol.messages import (CountMessageTokensRequest, CountMessageTokensResponse, ErrorResponse,
                                      MessageResponse, MessagesRequest)
from inferd.protocol.rerank import RerankRequest, RerankResponse
from inferd.protocol.responses import ResponseObject, ResponsesRequest

router = APIRouter()

# Swagger UI's and ReDoc's browser bundles come from the fastapi-offline package (a dependency, which
# ships them as plain files), never from a CDN. Found without importing it: only its files are used.
_OFFLINE = importlib.util.find_spec("fastapi_offline")
if _OFFLINE is None or _OFFLINE.origin is None:  # pragma: no cover - a dependency
    raise ImportError("fastapi-offline is not installed: it ships the /docs and /redoc scripts")
DOCS_ASSETS = Path(_OFFLINE.origin).resolve().parent / "static"
ASSET_TYPES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}

# Starts Swagger UI on the page's #swagger-ui (FastAPI's own settings), from a file rather than an
# inline script, so that the CSP allows no inline script. validatorUrl null: Swagger UI would
# otherwise send the document to an outside validator for its badge.
SWAGGER_INIT = b"""\
"use strict";
window.ui = SwaggerUIBundle({
  url: document.getElementById("swagger-ui").dataset.openapiUrl,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
"""

SWAGGER_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>inferd API - Swagger UI</title>
<link rel="icon" href="/docs/assets/favicon.png">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi-url="/openapi.json"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/swagger-init.js"></script>
</body>
</html>
"""

REDOC_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>inferd API - ReDoc</title>
<link rel="icon" href="/docs/assets/favicon.png">
</head>
<body>
<redoc spec-url="/openapi.json"></redoc>
<script src="/docs/assets/redoc.standalone.js"></script>
</body>
</html>
"""

# Scripts, styles, images and calls ("Try it out" included) from this server only; no inline script,
# no eval. Swagger UI sets its styles through the CSSOM only. ReDoc's styled-components inject
# <style> elements ('unsafe-inline' for styles, on /redoc alone), and ReDoc runs its search index in
# a worker it makes from a blob: URL.
_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'{styles}; img-src 'self' data:; "
           "font-src 'self' data:; connect-src 'self'; worker-src {workers}; base-uri 'none'; "
           "form-action 'none'; frame-ancestors 'none'")
_COMMON = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
SWAGGER_HEADERS = {"Content-Security-Policy": _POLICY.format(styles="", workers="'none'"), **_COMMON}
REDOC_HEADERS = {"Content-Security-Policy": _POLICY.format(styles=" 'unsafe-inline'", workers="'self' blob:"),
                 **_COMMON}


@router.get("/docs", include_in_schema=False)
async def swagger_ui() -> HTMLResponse:
    """The API document in Swagger UI."""
    return HTMLResponse(SWAGGER_PAGE, headers=SWAGGER_HEADERS)


@router.get("/redoc", include_in_schema=False)
async def redoc() -> HTMLResponse:
    """The API document in ReDoc."""
    return HTMLResponse(REDOC_PAGE, headers=REDOC_HEADERS)


@router.get("/docs/assets/{name}", include_in_schema=False)
async def docs_asset(name: str) -> Response:
    """One of the documentation pages' scripts, styles or icon: a fixed list of names, nothing else."""
    if name == "swagger-init.js":
        return Response(SWAGGER_INIT, media_type="text/javascript; charset=utf-8", headers=SWAGGER_HEADERS)
    if name not in ASSET_TYPES:
        raise NotFound(f"No documentation file '{name}'", code="unknown_route")
    return FileResponse(DOCS_ASSETS / name, media_type=ASSET_TYPES[name], headers=SWAGGER_HEADERS)


# The raw-ASGI routes' entries. Their words are docs/api.md's (routes, limits, errors and codes);
# tests/docs/test_api_documented.py holds the two together.
_RETRY = "with `Retry-After`"
_KEY_ERRORS: dict[int, str] = {
    401: "`missing_api_key`, `invalid_api_key`, `key_revoked`, `key_expired`",
    403: "`model_not_allowed` (outside the org's, team's or key's models), `key_type_not_permitted` (a user key)",
    404: "`model_not_found`",
    408: "`request_timeout`: the body came slower than [limits] body_timeout_s allows",
    413: "`request_too_large`: the body passed 32 MiB; the connection is closed",
    429: f"`rate_limit_exceeded`: a window of the key, its team or the model is full, {_RETRY}",
}
_ENGINE_ERRORS: dict[int, str] = {
    502: "`upstream_error`, `upstream_closed`, `upstream_auth_failed`",
    503: f"`model_maintenance`, `model_overloaded` ({_RETRY}), `engine_unavailable`",
    504: "`timeout`: no byte from the engine within the model's timeout_s",
}
_BUDGET_ERRORS: dict[int, str] = {402: "`budget_exceeded`: a key's, team's or org's budget is spent for its period"}
_BAD_PARAM = "`invalid_request`: a field or parameter missing, of the wrong type or out of range (param names it)"
_BAD_BODY = "`invalid_json`: the body is not JSON; `model_type_mismatch`: the model cannot serve this route"
_CHAT_400 = (f"{_BAD_PARAM}; {_BAD_BODY}; `context_length_exceeded`, `image_input_unsupported`, "
             "`image_url_not_allowed`")


def _errors(model: type[BaseModel], by_status: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """The error responses of a route, each in `model`'s envelope; `default` for any other."""
    responses: dict[int | str, dict[str, Any]] = {
        status: {"model": model, "description": words} for status, words in sorted(by_status.items())}
    responses["default"] = {"model": model, "description": "Any other error, in the same envelope."}
    return responses


def _openai_errors(bad_request: str, *, metered: bool = True,
                   more: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """The envelope every route but the dialects' and the conversations' answers in."""
    return _errors(APIErrorEnvelope, {400: bad_request, **_KEY_ERRORS, **(_BUDGET_ERRORS if metered else {}),
                                      **_ENGINE_ERRORS, **(more or {})})


def _anthropic_errors(*, metered: bool = True) -> dict[int | str, dict[str, Any]]:
    """Anthropic's dialect answers errors in its own envelope, with Anthropic's types."""
    return _errors(ErrorResponse, {
        400: "`invalid_request_error`", 401: "`authentication_error`", **({402: "`billing_error`"} if metered else {}),
        403: "`permission_error`", 404: "`not_found_error`", 413: "`request_too_large`",
        429: f"`rate_limit_error`, {_RETRY}", 500: "`api_error` (and any other 5xx)", 503: "`overloaded_error`"})


@dataclass(frozen=True)
class HotRoute:
    """A raw-ASGI route as /openapi.json documents it."""

    path: str
    name: str  # with the path, the operationId (`chat_completions_v1_chat_completions_post`)
    tag: str
    request: type[BaseModel]
    response: type[BaseModel]
    summary: str
    description: str
    errors: dict[int | str, dict[str, Any]]


HOT_ROUTES = (
    HotRoute("/v1/chat/completions", "chat_completions", "chat", ChatCompletionRequest, ChatCompletionResponse,
             "Chat completion",
             "Chat, blocking or streamed: with `stream` true, `text/event-stream` of chunks, the last before "
             "`data: [DONE]` carrying `usage`; a stream that breaks after its first byte ends with an error "
             "frame. Metered: one usage row, counted against the key's windows and budgets.",
             _openai_errors(_CHAT_400)),
    HotRoute("/v1/chat/count_tokens", "count_tokens", "chat", CountTokensRequest, CountTokensResponse,
             "Count a chat prompt's tokens",
             "The prompt tokens a completion of this request would bill, and the model's context window "
             "(exact where the engine has a tokenizer). Free: no usage row, no budget; counted against the "
             "key's windows.",
             _openai_errors(f"{_BAD_PARAM}; {_BAD_BODY}", metered=False)),
    HotRoute("/v1/embeddings", "embeddings", "embeddings", EmbeddingRequest, EmbeddingResponse, "Embeddings",
             "Dense embeddings of at most 2048 inputs; priced on input tokens only. Metered.",
             _openai_errors(f"{_BAD_PARAM}, more than 2048 inputs too; {_BAD_BODY}")),
    HotRoute("/v1/rerank", "rerank", "rerank", RerankRequest, RerankResponse, "Rerank",
             "`{model, query, documents, top_n}`: results by `relevance_score`, best first; at most 1000 "
             "documents. Metered.",
             _openai_errors(f"{_BAD_PARAM}, more than 1000 documents too; {_BAD_BODY}")),
    HotRoute("/v1/messages", "messages", "messages", MessagesRequest, MessageResponse, "Anthropic's Messages API",
             "Anthropic's Messages API on every chat model: blocking, or `text/event-stream` of Anthropic's "
             "events when `stream` is true; a stream that breaks after it started ends with an `error` event. "
             "Metered and billed as chat (one usage row in workspace `chat`).",
             _anthropic_errors()),
    HotRoute("/v1/messages/count_tokens", "count_message_tokens", "messages", CountMessageTokensRequest,
             CountMessageTokensResponse, "Count a Messages prompt's tokens",
             "The prompt tokens a message of this request would bill. Free: no usage row, no budget; counted "
             "against the key's windows.",
             _anthropic_errors(metered=False)),
    HotRoute("/v1/responses", "responses", "responses", ResponsesRequest, ResponseObject, "OpenAI's Responses API",
             "OpenAI's Responses API on every chat model: blocking, or `text/event-stream` of typed events "
             "(each with a `sequence_number`) when `stream` is true; a stream that breaks ends with "
             "`response.failed`. Metered and billed as chat; stored for the key 30 days unless `store` is "
             "false. Other tool types, `input_file`, file ids and `background` are refused with 400.",
             _openai_errors(_CHAT_400, more={404: "`model_not_found`, `response_not_found` (a "
                                                  "previous_response_id of another key, or of none)"})),
)


def _stub(request: type[BaseModel]) -> Callable[..., Awaitable[Any]]:
    """An endpoint FastAPI reads `request` from, as the JSON body's schema; never called."""
    async def endpoint(request: Any) -> Any:
        raise ServiceUnavailable("not served here")

    parameter = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=request)
    endpoint.__signature__ = inspect.Signature([parameter])  # type: ignore[attr-defined]
    return endpoint


for _route in HOT_ROUTES:
    router.add_api_route(_route.path, _stub(_route.request), methods=["POST"], name=_route.name,
                         response_model=_route.response, tags=[_route.tag], summary=_route.summary,
                         description=_route.description, responses=_route.errors)


# FastAPI documents a 422 `HTTPValidationError` on every route with a body or parameters; inferd
# answers such a refusal 400 in the route's envelope (app.py's handler), except this route's.
ANSWERS_422 = "/v1/auth/exchange"
_ENVELOPES: dict[str, type[BaseModel]] = {prefix: AppErrorEnvelope for prefix in USER_SCOPED_PREFIXES}


def openapi_document(api: FastAPI) -> dict[str, Any]:
    """FastAPI's document of `api` (built once and kept, as FastAPI's own is), with its refusals as
    they are served: a bad field or parameter is 400 (not 422), in the route's envelope."""
    if api.openapi_schema is not None:
        return api.openapi_schema
    document = FastAPI.openapi(api)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in (APIErrorEnvelope, AppErrorEnvelope):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    for path, operations in document["paths"].items():
        model = next((m for prefix, m in _ENVELOPES.items() if path.startswith(prefix)), APIErrorEnvelope)
        envelope = {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}
        for operation in operations.values():
            responses = operation["responses"]
            if path == ANSWERS_422:
                responses["422"] = {"description": "`validation_error`, `invalid_json`: a malformed body",
                                    "content": envelope}
            elif responses.pop("422", None) is not None or "requestBody" in operation:
                responses.setdefault("400", {"description": _BAD_PARAM, "content": envelope})
    if "#/components/schemas/HTTPValidationError" not in json.dumps(document["paths"]):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
    return document

"""The API's documentation pages, /docs (Swagger UI) and /redoc (ReDoc), served with their scripts
from this server alone; and the OpenAPI entries of the raw-ASGI hot routes (the dispatcher in
app.py answers those paths before FastAPI sees them: the stubs exist so /openapi.json documents
their schemas)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, Response

from inferd.errors import NotFound, ServiceUnavailable
from inferd.protocol.chat import (ChatCompletionRequest, ChatCompletionResponse, CountTokensRequest,
                                  CountTokensResponse)
from inferd.protocol.embeddings import EmbeddingRequest, EmbeddingResponse
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


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, tags=["chat"])
async def chat_completions(request: ChatCompletionRequest) -> ChatCompletionResponse:
    """Blocking, or `text/event-stream` of chunks ending with `data: [DONE]` when `stream` is true."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/chat/count_tokens", response_model=CountTokensResponse, tags=["chat"])
async def count_tokens(request: CountTokensRequest) -> CountTokensResponse:
    """Prompt tokens a completion of this request would bill; free, no usage row."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/embeddings", response_model=EmbeddingResponse, tags=["embeddings"])
async def embeddings(request: EmbeddingRequest) -> EmbeddingResponse:
    """Dense embeddings; priced on input tokens only."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/rerank", response_model=RerankResponse, tags=["rerank"])
async def rerank(request: RerankRequest) -> RerankResponse:
    """Documents scored against the query, best first."""
    raise ServiceUnavailable("not served here")


# Anthropic's dialect answers errors in its own envelope (docs/api.md, Errors).
_ANTHROPIC_ERRORS: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 402, 403, 404, 413, 429, 500, 503)}


@router.post("/v1/messages", response_model=MessageResponse, tags=["messages"], responses=_ANTHROPIC_ERRORS)
async def messages(request: MessagesRequest) -> MessageResponse:
    """Anthropic's Messages API on any chat model: blocking, or `text/event-stream` of Anthropic's events
    when `stream` is true. Metered and billed as chat."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/messages/count_tokens", response_model=CountMessageTokensResponse, tags=["messages"],
             responses=_ANTHROPIC_ERRORS)
async def count_message_tokens(request: CountMessageTokensRequest) -> CountMessageTokensResponse:
    """Prompt tokens a message of this request would bill; free, no usage row."""
    raise ServiceUnavailable("not served here")


@router.post("/v1/responses", response_model=ResponseObject, tags=["responses"])
async def responses(request: ResponsesRequest) -> ResponseObject:
    """OpenAI's Responses API on any chat model: blocking, or `text/event-stream` of typed events
    (each with a `sequence_number`) when `stream` is true. Metered and billed as chat; stored for
    the key 30 days unless `store` is false."""
    raise ServiceUnavailable("not served here")

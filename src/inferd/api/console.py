"""GET /console: the web console, static files shipped inside the package (no key to load it)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from inferd.errors import NotFound

router = APIRouter(include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "console" / "static"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}

# Everything the page loads comes from this server; the API it calls is this server's too. No
# 'unsafe-eval': the page runs Alpine's CSP build, which parses its attribute expressions itself
# instead of compiling them with `new Function`. No 'unsafe-inline' either: the page has no inline
# script or style (Alpine and Chart.js set styles through the CSSOM, which CSP does not restrict).
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data: blob:; connect-src 'self'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

# Names only: one or more segments of plain characters, a known extension, no `..`, no dot-files.
_ASSET = re.compile(r"(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def _file(name: str) -> FileResponse:
    missing = NotFound(f"No console file '{name}'", code="unknown_route")
    suffix = Path(name).suffix
    # The name is checked before it touches the file system; the resolved path is checked again.
    if not _ASSET.fullmatch(name) or ".." in name or suffix not in CONTENT_TYPES:
        raise missing
    path = (STATIC / name).resolve()
    if not path.is_relative_to(STATIC) or not path.is_file():
        raise missing
    return FileResponse(path, media_type=CONTENT_TYPES[suffix], headers=HEADERS)


@router.get("/console")
async def console_page() -> FileResponse:
    """The console's single page; it signs in with an admin key kept in the browser session."""
    return _file("index.html")


@router.get("/console/{asset:path}")
async def console_asset(asset: str) -> FileResponse:
    """One of the console's static files (its script, styles and the vendored libraries)."""
    return _file(asset or "index.html")

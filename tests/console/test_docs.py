"""/docs (Swagger UI) and /redoc (ReDoc) against the running server: every script, style and icon
they load is this server's own (from the fastapi-offline package, never a CDN), each page carries a
Content-Security-Policy, and in Chromium each renders the API document breaking none of it and
asking nothing of any other origin."""

from __future__ import annotations

import re
from typing import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.console.conftest import Tab, assert_clean, watch
from tests.harness import Server

# src and href attributes of the page's tags.
_REFERENCE = re.compile(r'<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]*)"')


def _policy(response: httpx.Response) -> dict[str, str]:
    """The Content-Security-Policy header as {directive: sources}."""
    policy = response.headers["content-security-policy"]
    return {part.split()[0]: " ".join(part.split()[1:]) for part in policy.split(";") if part.strip()}


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_page_loads_only_this_servers_files(console_server: Server, path: str) -> None:
    response = httpx.get(console_server.base_url + path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    policy = _policy(response)
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"  # no CDN, no inline script, no eval
    assert policy["connect-src"] == "'self'"
    # Styles inline only where ReDoc needs them (its styled-components inject <style> elements).
    assert policy["style-src"] == ("'self'" if path == "/docs" else "'self' 'unsafe-inline'")
    assert "unsafe-eval" not in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"

    page = response.text
    assert "http://" not in page and "https://" not in page and '="//' not in page
    assert "<script>" not in page and "<style" not in page  # nothing inline
    references = _REFERENCE.findall(page)
    assert any(ref.endswith(".js") for ref in references), references
    for reference in references:
        assert reference.startswith("/docs/assets/"), reference
        asset = httpx.get(console_server.base_url + reference)
        assert asset.status_code == 200, reference
        assert len(asset.content) > 100, reference
        assert "default-src 'none'" in asset.headers["content-security-policy"]


@pytest.mark.parametrize("name, content_type", [
    ("swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    ("swagger-init.js", "text/javascript; charset=utf-8"),
    ("swagger-ui.css", "text/css; charset=utf-8"),
    ("redoc.standalone.js", "text/javascript; charset=utf-8"),
    ("favicon.png", "image/png"),
])
def test_assets(console_server: Server, name: str, content_type: str) -> None:
    response = httpx.get(f"{console_server.base_url}/docs/assets/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type


@pytest.mark.parametrize("path", ["/docs/assets/core.py", "/docs/assets/..%2fcore.py", "/docs/assets/",
                                  "/docs/oauth2-redirect"])
def test_nothing_else_is_served(console_server: Server, path: str) -> None:
    response = httpx.get(console_server.base_url + path)
    assert response.status_code == 404, path


def test_not_in_the_api_document(console_server: Server) -> None:
    paths = httpx.get(console_server.base_url + "/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith(("/docs", "/redoc"))]


@pytest.fixture()
def tab(console_server: Server, browser: Browser) -> Iterator[Tab]:
    """A fresh browser tab on the server; afterwards, no script error, no CSP violation, no foreign request."""
    context = browser.new_context(viewport={"width": 1360, "height": 860})
    tab = Tab(context.new_page(), console_server)
    watch(tab)
    try:
        yield tab
    finally:
        context.close()
    assert_clean(tab)


def test_swagger_ui_renders_the_api(tab: Tab) -> None:
    page = tab.page
    page.goto(tab.server.base_url + "/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("inferd")
    operation = page.locator('.opblock[id$="v1_chat_completions_post"]').first
    expect(operation).to_be_visible()
    # Open it: its schema renders from the document (more of the bundle runs under the CSP).
    operation.locator(".opblock-summary").first.click()
    expect(operation.locator(".opblock-body")).to_be_visible()
    # "Try it out" calls this server (connect-src 'self'): without a key, the 401 shows.
    models = page.locator('.opblock[id$="v1_models_get"]').first
    models.locator(".opblock-summary").first.click()
    models.locator(".try-out__btn").click()
    models.locator(".execute").click()
    expect(models.locator(".live-responses-table tbody .response-col_status").first).to_contain_text("401")


# ReDoc's side menu ends in "API docs by Redocly" with Redocly's logo from their CDN, always (no
# option turns it off): the policy refuses the image before any request leaves, and ReDoc drops it.
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def test_redoc_renders_the_api(tab: Tab) -> None:
    page = tab.page
    tab.refused = (REDOC_LOGO,)
    failed: dict[str, str | None] = {}
    page.on("requestfailed", lambda request: failed.__setitem__(request.url, request.failure))
    page.goto(tab.server.base_url + "/redoc")
    expect(page.locator("h1").first).to_contain_text("inferd")
    expect(page.get_by_text("/v1/chat/completions").first).to_be_attached()
    # The search box runs in ReDoc's worker (made from a blob: URL).
    page.locator('input[placeholder="Search..."]').fill("embeddings")
    expect(page.locator('[data-role="search:results"] li').first).to_be_visible()
    # The logo was refused by the policy, not fetched.
    assert failed.get(REDOC_LOGO) == "csp", failed  # Chromium's reason: blocked by the CSP

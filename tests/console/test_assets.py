"""GET /console and its static files: served without a key, with their content types, from the
package alone; nothing outside the static folder can be read through them."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import Server


def test_page_loads_without_a_key(console_server: Server) -> None:
    for path in ("/console", "/console/"):
        response = httpx.get(console_server.base_url + path)
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "connect-src 'self'" in policy
        # Alpine's CSP build needs neither: no string is compiled as script, nothing is inline.
        assert "script-src 'self';" in policy
        assert "unsafe-eval" not in policy and "unsafe-inline" not in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert b'id="signin-form"' in response.content
        # Only this server's own files: no scheme-relative or absolute URL to anywhere else.
        assert b"http://" not in response.content and b"https://" not in response.content
        assert b'src="//' not in response.content and b'href="//' not in response.content


@pytest.mark.parametrize("path, content_type", [
    ("/console/console.js", "text/javascript; charset=utf-8"),
    ("/console/usage.js", "text/javascript; charset=utf-8"),
    ("/console/teams.js", "text/javascript; charset=utf-8"),
    ("/console/console.css", "text/css; charset=utf-8"),
    ("/console/vendor/alpine-csp.min.js", "text/javascript; charset=utf-8"),
    ("/console/vendor/chart.umd.min.js", "text/javascript; charset=utf-8"),
    ("/console/vendor/LICENSES.txt", "text/plain; charset=utf-8"),
])
def test_assets(console_server: Server, path: str, content_type: str) -> None:
    response = httpx.get(console_server.base_url + path)
    assert response.status_code == 200, path
    assert response.headers["content-type"] == content_type
    assert len(response.content) > 100


@pytest.mark.parametrize("path", [
    "/console/nope.js",
    "/console/vendor/.built",                 # dot-files are not assets
    "/console/vendor/manifest.json",          # the build's record, not a file the page loads
    "/console/../api/console.py",             # the client may not normalise: the server never resolves outside
    "/console/%2e%2e/api/console.py",
    "/console/vendor/..%2f..%2f..%2fapp.py",
    "/console/..%2f..%2fapp.py",
    "/console/vendor/%2e%2e/%2e%2e/%2e%2e/api/console.py",
    "/console//etc/passwd",
    "/console/index.html%00.js",
    "/console/console.js/",
])
def test_nothing_else_is_served(console_server: Server, path: str) -> None:
    # Sent as written (httpx would otherwise normalise `..` away before it left).
    with httpx.Client(base_url=console_server.base_url) as client:
        request = client.build_request("GET", "http://placeholder")
        request.url = httpx.URL(console_server.base_url + "/").copy_with(raw_path=path.encode())
        response = client.send(request)
    assert response.status_code == 404, (path, response.status_code)
    assert response.json()["error"]["type"] == "not_found_error"


def test_not_in_the_api_document(console_server: Server) -> None:
    paths = httpx.get(console_server.base_url + "/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith("/console")]

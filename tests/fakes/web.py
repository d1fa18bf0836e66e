"""A loopback stand-in for a web search provider and the pages its results name.

One HTTP server on 127.0.0.1 (a thread of the test process) speaking:
- SearXNG's JSON API: `GET /search?q=...&format=json` -> `{"results": [{"title", "url", "content"}]}`
- Brave's: `GET /res/v1/web/search?q=...&count=N` with `X-Subscription-Token: brave-key`
  -> `{"web": {"results": [{"title", "url", "description"}]}}` (401 for another token)
- Tavily's: `POST /search` `{"query", "max_results"}` with `Authorization: Bearer tavily-key`
  -> `{"results": [{"title", "url", "content"}]}` (401 for another token)
- pages: `GET /pages/<name>` (HTML), `GET /redirect?to=URL` (302; `?hops=N`: a chain of N redirects
  ending at /pages/lark), `GET /big` (3 MiB of HTML), `GET /typed?type=T` (a short page whose
  content type is T)

The results of every query are `RESULTS`, their URLs on this server (or, for a path in `redirects`,
a `/redirect` to the URL named there). `mode` makes the provider fail:
"error" (500), "slow" (answers after 30 s), "garbage" (not JSON), "empty" (no results),
"empty-first" (no results for the first query, then the usual). Every query is recorded in `queries`
and every page path served in `pages_served`.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

PAGES = {
    "heron": ("<html><head><title>Heron Valley Railway</title></head><body><h1>Heron Valley Railway</h1>"
              "<p>Opening hours vary by season.</p><p>The Heron Valley Railway runs its steam service every "
              "Sunday; the return fare is 14 pounds for adults.</p><script>var secret = 'no';</script>"
              "<p>The line was reopened by volunteers in 1983.</p></body></html>"),
    "lark": ("<html><body><h1>Lark Island ferry</h1><p>The Lark Island ferry leaves Portmore harbour at 07:40 "
             "and 16:10.</p></body></html>"),
}
RESULTS = [
    {"title": "Heron Valley Railway: timetable and fares", "url": "/pages/heron",
     "snippet": "Steam trains between Ashby Halt and Heron Bridge. Book online."},
    {"title": "Lark Island ferry times", "url": "/pages/lark",
     "snippet": "The ferry to Lark Island sails twice a day from Portmore harbour."},
]


class FakeWeb:
    """The server; `url` is its base URL."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.queries: list[tuple[str, str]] = []  # (provider, query)
        self.pages_served: list[str] = []
        self.redirects: dict[str, str] = {}  # a result's path -> the URL its result redirects to
        web = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, kind: str = "application/json",
                      headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _results(self, provider: str, query: str) -> list[dict[str, str]] | None:
                """The results to answer with, or None when the mode answered already."""
                web.queries.append((provider, query))
                if web.mode == "error":
                    self._send(500, b'{"error": "engine down"}')
                    return None
                if web.mode == "slow":
                    time.sleep(30)
                    self._send(200, b'{"results": []}')
                    return None
                if web.mode == "garbage":
                    self._send(200, b"<html>not json</html>", "text/html")
                    return None
                if web.mode == "empty" or (web.mode == "empty-first" and len(web.queries) == 1):
                    return []
                return [{**r, "url": web.url + (f"/redirect?to={quote(web.redirects[r['url']], safe='')}"
                                                 if r["url"] in web.redirects else r["url"])} for r in RESULTS]

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path == "/search":
                    if query.get("format") != "json":
                        self._send(403, b"format not allowed")
                        return
                    results = self._results("searxng", query.get("q", ""))
                    if results is not None:
                        self._send(200, json.dumps({"query": query.get("q"), "results": [
                            {"title": r["title"], "url": r["url"], "content": r["snippet"], "engine": "fake"}
                            for r in results]}).encode())
                elif parts.path == "/res/v1/web/search":
                    if self.headers.get("x-subscription-token") != "brave-key":
                        self._send(401, b'{"error": "bad token"}')
                        return
                    results = self._results("brave", query.get("q", ""))
                    if results is not None:
                        count = int(query.get("count", "20"))
                        self._send(200, json.dumps({"type": "search", "web": {"results": [
                            {"title": r["title"], "url": r["url"], "description": r["snippet"]}
                            for r in results[:count]]}}).encode())
                elif parts.path.startswith("/pages/"):
                    name = parts.path[len("/pages/"):]
                    web.pages_served.append(parts.path)
                    if name in PAGES:
                        self._send(200, PAGES[name].encode(), "text/html; charset=utf-8")
                    else:
                        self._send(404, b"no such page", "text/plain")
                elif parts.path == "/redirect":
                    web.pages_served.append(parts.path)
                    hops = int(query.get("hops", "0"))  # a chain: /redirect?hops=N takes N more redirects
                    target = f"/redirect?hops={hops - 1}" if hops > 1 else query.get("to", "/pages/lark")
                    self._send(302, b"", "text/plain", {"location": target})
                elif parts.path == "/typed":  # a short page served as `?type=` says
                    web.pages_served.append(parts.path)
                    self._send(200, b"Plain words about <b>herons</b>.", query.get("type", "text/plain"))
                elif parts.path == "/big":
                    web.pages_served.append(parts.path)
                    paragraph = b"<p>" + b"filler words of a very long page " * 30 + b"</p>\n"
                    self._send(200, b"<html><body>" + paragraph * (3 * 1024 * 1024 // len(paragraph)) + b"</body>",
                               "text/html")
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                if urlsplit(self.path).path != "/search":
                    self._send(404, b"{}")
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                if self.headers.get("authorization") != "Bearer tavily-key":
                    self._send(401, b'{"detail": {"error": "Unauthorized"}}')
                    return
                results = self._results("tavily", str(body.get("query", "")))
                if results is not None:
                    limit = int(body.get("max_results", 5))
                    self._send(200, json.dumps({"query": body.get("query"), "results": [
                        {"title": r["title"], "url": r["url"], "content": r["snippet"], "score": 0.9}
                        for r in results[:limit]]}).encode())

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def reset(self, mode: str = "ok") -> None:
        self.mode = mode
        self.queries.clear()
        self.pages_served.clear()
        self.redirects.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

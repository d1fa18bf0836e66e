"""The `[web_search]` table: the provider a conversation's `webSearch=true` searches with.

```toml
[web_search]
provider = "searxng"                 # "searxng", "brave" or "tavily"; required
base_url = "http://searxng:8080"     # required for searxng; brave and tavily default to their APIs
api_key = "…"                        # required for brave and tavily
max_results = 5                      # results given to the model per search
timeout_s = 10.0                     # one search (and one page fetch)
fetch_pages = false                  # true: fetch each result page (public addresses only)
fetch_allow = []                     # hosts fetched even when they resolve to a private address
```

Without the table `webSearch=true` is ignored, whatever an org's `web_search` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable
from urllib.parse import urlsplit

from inferd.errors import ConfigError

TABLE = "[web_search]"
PROVIDERS = ("searxng", "brave", "tavily")
DEFAULT_BASE_URLS = {"brave": "https://api.search.brave.com", "tavily": "https://api.tavily.com"}
MAX_RESULTS = 20

Fail = Callable[[str, str | None, str], ConfigError]


@dataclass(frozen=True)
class WebSearchConfig:
    """One search provider and how its results are used."""

    provider: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)  # never printed
    max_results: int = 5
    timeout_s: float = 10.0
    fetch_pages: bool = False
    fetch_allow: tuple[str, ...] = ()


def parse_web_search(fail: Fail, raw: Any) -> WebSearchConfig:
    """The checked `[web_search]` table; ConfigError naming the key otherwise."""
    if not isinstance(raw, dict):
        raise fail(TABLE, None, "expected a table")
    known = [f.name for f in fields(WebSearchConfig)]
    for key, value in raw.items():
        if key not in known:
            raise fail(TABLE, key, f"unknown key (known: {', '.join(known)})")
    provider = raw.get("provider")
    if provider not in PROVIDERS:
        raise fail(TABLE, "provider", f"expected one of {', '.join(PROVIDERS)}, got {provider!r}")
    for key in ("base_url", "api_key"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key]):
            raise fail(TABLE, key, "expected a non-empty string")
    base_url = raw.get("base_url") or DEFAULT_BASE_URLS.get(provider)
    if base_url is None:
        raise fail(TABLE, "base_url", "missing (the SearXNG instance's URL, e.g. http://searxng:8080)")
    url = urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise fail(TABLE, "base_url", "expected an http:// or https:// URL")
    if provider != "searxng" and not raw.get("api_key"):
        raise fail(TABLE, "api_key", f"missing ({provider} needs an API key)")
    results = raw.get("max_results", 5)
    if isinstance(results, bool) or not isinstance(results, int) or not 1 <= results <= MAX_RESULTS:
        raise fail(TABLE, "max_results", f"expected an integer from 1 to {MAX_RESULTS}")
    timeout = raw.get("timeout_s", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise fail(TABLE, "timeout_s", "expected a positive number")
    if not isinstance(raw.get("fetch_pages", False), bool):
        raise fail(TABLE, "fetch_pages", "expected true or false")
    allow = raw.get("fetch_allow", [])
    if not isinstance(allow, list) or not all(isinstance(host, str) and host for host in allow):
        raise fail(TABLE, "fetch_allow", "expected an array of host names")
    return WebSearchConfig(provider=provider, base_url=base_url.rstrip("/"), api_key=raw.get("api_key"),
                           max_results=results, timeout_s=float(timeout),
                           fetch_pages=bool(raw.get("fetch_pages", False)),
                           fetch_allow=tuple(host.lower() for host in allow))

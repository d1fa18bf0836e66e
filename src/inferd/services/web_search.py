"""Web search for generate turns: one provider (SearXNG, Brave or Tavily) behind one small interface,
and the results as passages the model reads and a client cites.

The provider is the operator's (`[web_search]`), reached at the URL the operator configured, so its
address is not checked; the result pages it names are, by `page_fetch.py`, when `fetch_pages` is on.
A provider that fails, times out or answers garbage raises `WebSearchFailed`: the turn stores an
error row and answers without the web, never fails for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any

import httpx

from inferd.config_web_search import WebSearchConfig
from inferd.services.page_fetch import FetchRefused, PageFetcher

log = logging.getLogger("inferd.web_search")

SNIPPET_CHARS = 500  # of a provider's snippet
PAGE_CHARS = 1500  # of a fetched page: the paragraphs that share most words with the query
WEB_SEARCH_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "web_search",
    "description": "Search the web and return the titles, addresses and snippets of the best results. Use it "
                   "when the question needs current or public facts that the conversation does not hold.",
    "parameters": {"type": "object", "required": ["query"], "properties": {
        "query": {"type": "string", "description": "what to search for, in a few words"}}}}}
_WORD = re.compile(r"\w+")


class WebSearchFailed(Exception):
    """The provider could not be asked or answered badly."""


@dataclass(frozen=True)
class WebResult:
    """One result: what the provider said of a page and, with `fetch_pages`, what the page says."""

    title: str
    url: str
    snippet: str
    text: str  # what the model reads: the snippet, or the page's best paragraphs

    def shown(self) -> dict[str, str]:
        """The result as the `web_search` frame and the tool row show it."""
        return {"title": self.title, "url": self.url, "snippet": self.snippet}

    # The grounding module numbers passages and cites them; a web result is one passage.
    @property
    def source_name(self) -> str:
        return f"{self.title} ({self.url})" if self.title else self.url

    @property
    def heading(self) -> None:
        return None

    def reference(self, index: int) -> dict[str, Any]:
        """A citation of the result, numbered as the model saw it."""
        return {"index": index, "type": "web", "title": self.title, "url": self.url}


def _clean(value: Any, limit: int) -> str:
    return re.sub(r"\s+", " ", value).strip()[:limit] if isinstance(value, str) else ""


def _results(items: Any, snippet_key: str, limit: int) -> list[tuple[str, str, str]]:
    """(title, url, snippet) of a provider's result list; WebSearchFailed when it is not one."""
    if not isinstance(items, list):
        raise WebSearchFailed("the provider's answer holds no result list")
    found = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("url"), str) and item["url"].startswith(("http://",
                                                                                                    "https://")):
            found.append((_clean(item.get("title"), 300), item["url"], _clean(item.get(snippet_key), SNIPPET_CHARS)))
        if len(found) == limit:
            break
    return found


def best_paragraphs(text: str, query: str, limit: int = PAGE_CHARS) -> str:
    """The paragraphs of a page that share most words with the query, in page order, up to `limit`."""
    wanted = {word.lower() for word in _WORD.findall(query) if len(word) > 2}
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n|\n(?=#)", text) if p.strip()]
    ranked = sorted(range(len(paragraphs)), key=lambda i: (-len(wanted & {w.lower() for w in
                                                                         _WORD.findall(paragraphs[i])}), i))
    chosen: list[int] = []
    size = 0
    for i in ranked:
        if size + len(paragraphs[i]) > limit and chosen:
            continue
        chosen.append(i)
        size += len(paragraphs[i])
        if size >= limit:
            break
    # One line each: a blank line would read as the end of the passage in the model's prompt.
    return "\n".join(re.sub(r"\s*\n\s*", " ", paragraphs[i]) for i in sorted(chosen))[:limit]


class WebSearch:
    """Searches with the configured provider; `fetch_pages` adds each result page's best paragraphs."""

    def __init__(self, config: WebSearchConfig) -> None:
        self.config = config
        self._client = httpx.AsyncClient(timeout=config.timeout_s, follow_redirects=False)
        self._pages = PageFetcher(config.fetch_allow, config.timeout_s) if config.fetch_pages else None

    async def search(self, query: str) -> list[WebResult]:
        """The provider's best results for `query` (at most `max_results`)."""
        try:
            found = await asyncio.wait_for(self._ask(query), self.config.timeout_s)
        except WebSearchFailed:
            raise
        except (httpx.HTTPError, asyncio.TimeoutError, ValueError) as exc:
            raise WebSearchFailed(f"{self.config.provider}: {type(exc).__name__} {exc}".strip()) from None
        if self._pages is None:
            return [WebResult(title, url, snippet, snippet) for title, url, snippet in found]
        pages = await asyncio.gather(*(self._page(url, query) for _, url, _ in found))
        return [WebResult(title, url, snippet, page or snippet) for (title, url, snippet), page in zip(found, pages)]

    async def _page(self, url: str, query: str) -> str:
        assert self._pages is not None
        try:
            return best_paragraphs(await self._pages.text(url), query)
        except FetchRefused as exc:
            log.info("web page not fetched: %s", exc)
            return ""

    async def _ask(self, query: str) -> list[tuple[str, str, str]]:
        config = self.config
        limit = config.max_results
        if config.provider == "searxng":
            reply = await self._client.get(f"{config.base_url}/search", params={"q": query, "format": "json"})
            return _results(self._json(reply).get("results"), "content", limit)
        if config.provider == "brave":
            reply = await self._client.get(f"{config.base_url}/res/v1/web/search",
                                           params={"q": query, "count": limit},
                                           headers={"X-Subscription-Token": config.api_key or "",
                                                    "Accept": "application/json"})
            web = self._json(reply).get("web")
            return _results(web.get("results") if isinstance(web, dict) else None, "description", limit)
        reply = await self._client.post(f"{config.base_url}/search",
                                        json={"query": query, "max_results": limit},
                                        headers={"Authorization": f"Bearer {config.api_key}"})
        return _results(self._json(reply).get("results"), "content", limit)

    def _json(self, reply: httpx.Response) -> dict[str, Any]:
        if reply.status_code != 200:
            raise WebSearchFailed(f"{self.config.provider} answered {reply.status_code}")
        body = reply.json()
        if not isinstance(body, dict):
            raise WebSearchFailed(f"{self.config.provider} answered something other than a JSON object")
        return body

    async def aclose(self) -> None:
        await self._client.aclose()
        if self._pages is not None:
            await self._pages.aclose()


def format_results(results: list[WebResult]) -> str:
    """The tool result a model reads when it called `web_search`: numbered results with their URLs."""
    if not results:
        return "No web results."
    return "\n\n".join(f"[{i + 1}] {r.title} ({r.url}):\n{r.text}" for i, r in enumerate(results))

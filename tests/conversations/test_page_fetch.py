"""The web search providers' wire shapes and the page fetch guard, against the loopback stand-in
(tests/fakes/web.py): every address class that is not public is refused, after DNS resolution and on
every redirect, unless the host is allowed by name; at most 1 MiB of a page is read."""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Iterator
from urllib.parse import quote

import pytest

from inferd.config_web_search import WebSearchConfig, parse_web_search
from inferd.errors import ConfigError
from inferd.services.page_fetch import MAX_PAGE_BYTES, FetchRefused, PageFetcher, is_public
from inferd.services.web_search import WebSearch, WebSearchFailed
from tests.fakes.web import FakeWeb


@pytest.fixture(scope="module")
def web() -> Iterator[FakeWeb]:
    fake = FakeWeb()
    yield fake
    fake.close()


REFUSED = {
    "loopback": ["127.0.0.1", "127.8.9.10", "::1"],
    "private": ["10.0.0.1", "172.16.5.4", "192.168.1.1", "fc00::1", "fd12:3456::1"],
    "link-local and metadata": ["169.254.169.254", "169.254.0.1", "fe80::1", "fd00:ec2::254"],
    "shared (CGNAT)": ["100.64.0.1"],
    "unspecified": ["0.0.0.0", "::"],
    "multicast": ["224.0.0.1", "ff02::1"],
    "reserved and documentation": ["240.0.0.1", "192.0.2.1", "198.51.100.7", "2001:db8::1"],
    "IPv4 inside IPv6": ["::ffff:127.0.0.1", "::ffff:169.254.169.254", "2002:7f00:1::1", "::ffff:10.1.2.3"],
}


@pytest.mark.parametrize("kind", REFUSED)
def test_every_address_class_that_is_not_public_is_refused(kind: str) -> None:
    assert [address for address in REFUSED[kind] if is_public(address)] == []


def test_public_addresses_pass() -> None:
    assert all(is_public(a) for a in ("8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111",
                                      "::ffff:8.8.8.8"))


def fetch(url: str, allow: tuple[str, ...] = ()) -> str:
    async def work() -> str:
        fetcher = PageFetcher(allow, timeout_s=5)
        try:
            return await fetcher.text(url)
        finally:
            await fetcher.aclose()

    return asyncio.run(work())


def refused(url: str, allow: tuple[str, ...] = ()) -> str:
    with pytest.raises(FetchRefused) as caught:
        fetch(url, allow)
    return str(caught.value)


def test_loopback_is_refused_by_address_and_by_name(web: FakeWeb) -> None:
    web.reset()
    port = web.url.rsplit(":", 1)[1]
    for url in (f"{web.url}/pages/heron", f"http://localhost:{port}/pages/heron", f"http://[::1]:{port}/"):
        assert "not public" in refused(url)
    assert web.pages_served == []  # no connection was made


def test_a_name_that_resolves_to_a_private_address_is_refused(web: FakeWeb,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is on what the name resolves to (here a public-looking name resolving to 10.x)."""
    real = socket.getaddrinfo

    def resolve(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "intranet.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.20.30.40", args[0] if args else 80))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert "10.20.30.40" in refused("http://intranet.example.com/wiki")


def test_an_allowed_host_is_fetched_as_text(web: FakeWeb) -> None:
    web.reset()
    text = fetch(f"{web.url}/pages/heron", ("127.0.0.1",))
    assert "the return fare is 14 pounds" in text and "secret" not in text


def test_every_redirect_is_checked(web: FakeWeb) -> None:
    web.reset()
    port = web.url.rsplit(":", 1)[1]
    allowed = ("127.0.0.1",)
    # An allowed host redirecting to itself is followed...
    assert "Lark Island" in fetch(f"{web.url}/redirect?to=/pages/lark", allowed)
    # ...to the same address by another name, or to a metadata address, is not.
    assert "not public" in refused(f"{web.url}/redirect?to=http://localhost:{port}/pages/lark", allowed)
    assert "not public" in refused(f"{web.url}/redirect?to=http://169.254.169.254/latest/meta-data/", allowed)
    assert "http and https" in refused(f"{web.url}/redirect?to=file:///etc/passwd", allowed)
    assert "Lark Island" in fetch(f"{web.url}/redirect?hops=5", allowed)  # five redirects are followed
    assert "more than 5 redirects" in refused(f"{web.url}/redirect?hops=6", allowed)


RAW = "Plain words about <b>herons</b>."  # the /typed page: text as it is, unless HTML


@pytest.mark.parametrize("kind,expected", [
    ("text/plain", RAW), ("TEXT/PLAIN; charset=UTF-8", RAW), ("Text/Markdown", RAW),
    ("TEXT/HTML", "Plain words about herons."),
    ("application/pdf", ""), ("IMAGE/PNG", ""),
])
def test_a_pages_content_type_is_read_whatever_its_case(web: FakeWeb, kind: str, expected: str) -> None:
    """Media types are case-insensitive: `TEXT/PLAIN` is text, `TEXT/HTML` is HTML made text, and
    anything else is no text at all."""
    web.reset()
    assert fetch(f"{web.url}/typed?type={quote(kind)}", ("127.0.0.1",)).strip() == expected


def test_schemes_other_than_http_are_refused() -> None:
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://example.com/"):
        assert "http and https" in refused(url)


def test_a_page_is_read_up_to_one_mebibyte(web: FakeWeb) -> None:
    web.reset()
    text = fetch(f"{web.url}/big", ("127.0.0.1",))
    assert 0.5 * MAX_PAGE_BYTES < len(text.encode()) <= MAX_PAGE_BYTES


def config(web: FakeWeb, provider: str, **extra: Any) -> WebSearchConfig:
    def fail(table: str, key: str | None, problem: str) -> ConfigError:
        return ConfigError(f"{table} {key}: {problem}")

    return parse_web_search(fail, {"provider": provider, "base_url": web.url, **extra})


def search(cfg: WebSearchConfig, query: str) -> list[dict[str, str]]:
    async def work() -> list[dict[str, str]]:
        searcher = WebSearch(cfg)
        try:
            return [r.shown() for r in await searcher.search(query)]
        finally:
            await searcher.aclose()

    return asyncio.run(work())


@pytest.mark.parametrize("provider,extra", [("searxng", {}), ("brave", {"api_key": "brave-key"}),
                                            ("tavily", {"api_key": "tavily-key"})])
def test_each_provider_is_asked_in_its_own_shape(web: FakeWeb, provider: str, extra: dict[str, str]) -> None:
    web.reset()
    results = search(config(web, provider, max_results=1, **extra), "heron railway fares")
    assert web.queries == [(provider, "heron railway fares")]
    assert results == [{"title": "Heron Valley Railway: timetable and fares", "url": web.url + "/pages/heron",
                        "snippet": "Steam trains between Ashby Halt and Heron Bridge. Book online."}]


@pytest.mark.parametrize("provider", ["brave", "tavily"])
def test_a_wrong_api_key_is_a_failed_search(web: FakeWeb, provider: str) -> None:
    web.reset()
    with pytest.raises(WebSearchFailed, match="401"):
        search(config(web, provider, api_key="wrong"), "anything")


def test_the_table_is_checked() -> None:
    def fail(table: str, key: str | None, problem: str) -> ConfigError:
        return ConfigError(f"{table} {key}: {problem}")

    for raw, problem in [({"provider": "bing"}, "provider"), ({"provider": "searxng"}, "base_url"),
                         ({"provider": "brave"}, "api_key"),
                         ({"provider": "searxng", "base_url": "ftp://x"}, "base_url"),
                         ({"provider": "searxng", "base_url": "http://x", "max_results": 0}, "max_results"),
                         ({"provider": "searxng", "base_url": "http://x", "fetch_allow": "x"}, "fetch_allow"),
                         ({"provider": "searxng", "base_url": "http://x", "colour": 1}, "colour")]:
        with pytest.raises(ConfigError, match=problem):
            parse_web_search(fail, raw)
    parsed = parse_web_search(fail, {"provider": "tavily", "api_key": "k"})
    assert parsed.base_url == "https://api.tavily.com" and parsed.max_results == 5 and not parsed.fetch_pages

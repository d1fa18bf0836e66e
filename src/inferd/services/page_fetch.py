"""Fetching a web page that a search result names, without becoming a way into the private network.

A result URL is chosen by a search engine (and so by whoever wrote the page it indexed): fetched
naively, `http://169.254.169.254/latest/meta-data/` or `http://localhost:6379/` would be read by
the gateway from inside the deployment. So every connection, the first and each redirect's, goes
through `GuardedBackend`, which resolves the host itself, refuses it unless every address is a
public one, and connects to the address it checked (a second lookup could answer differently: DNS
rebinding). Hosts in `[web_search] fetch_allow` skip the address check; nothing else does.

Only http and https, at most MAX_REDIRECTS redirects, at most MAX_PAGE_BYTES read (the rest is never
downloaded), and the visible text of HTML or plain-text pages.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any, Iterable
from urllib.parse import urljoin, urlsplit

import httpcore

from inferd.services.ingest.extract import decode_text, html_to_text

MAX_PAGE_BYTES = 1024 * 1024
MAX_REDIRECTS = 5
USER_AGENT = "inferd-web-search/1"
_REDIRECTS = (301, 302, 303, 307, 308)


class FetchRefused(Exception):
    """The page may not be fetched (an address class, a scheme, too many redirects) or could not be."""


def is_public(address: str) -> bool:
    """Whether an IP address is on the public internet: not loopback, private, link-local (cloud
    metadata services live there), shared (CGNAT), multicast, reserved or unspecified. An IPv6
    address that embeds an IPv4 one is judged by that."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return is_public(str(embedded))
    return ip.is_global and not ip.is_multicast


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, but a TCP connection is made only to a checked public address."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._allow = frozenset(host.lower() for host in allow)

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        if host.lower().strip("[]") in self._allow:
            return await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise FetchRefused(f"{host}: the name does not resolve ({exc})") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        refused = [address for address in addresses if not is_public(address)]
        if not addresses or refused:
            raise FetchRefused(f"{host} resolves to an address that is not public ({', '.join(refused)})")
        return await self._inner.connect_tcp(addresses[0], port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise FetchRefused("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PageFetcher:
    """Fetches result pages through one guarded connection pool (closed with the server)."""

    def __init__(self, allow: Iterable[str], timeout_s: float) -> None:
        self._pool = httpcore.AsyncConnectionPool(network_backend=GuardedBackend(allow), max_connections=16,
                                                  retries=0)
        self._timeout = {"connect": timeout_s, "read": timeout_s, "write": timeout_s, "pool": timeout_s}
        self._timeout_s = timeout_s

    async def text(self, url: str) -> str:
        """The page's visible text (HTML made plain), at most MAX_PAGE_BYTES of it read; FetchRefused
        when the URL or any redirect's may not be fetched, or the page cannot be read in time."""
        try:
            return await asyncio.wait_for(self._follow(url), self._timeout_s)
        except FetchRefused:
            raise
        except (httpcore.TimeoutException, asyncio.TimeoutError):
            raise FetchRefused(f"{url}: no page within {self._timeout_s:g} s") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, ValueError) as exc:
            raise FetchRefused(f"{url}: {exc or type(exc).__name__}") from None

    async def _follow(self, url: str) -> str:
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FetchRefused(f"{url}: only http and https pages are fetched")
            headers = [(b"user-agent", USER_AGENT.encode()), (b"accept", b"text/html, text/plain;q=0.9")]
            async with self._pool.stream("GET", url, headers=headers,
                                         extensions={"timeout": self._timeout}) as response:
                if response.status in _REDIRECTS:
                    location = dict((k.lower(), v) for k, v in response.headers).get(b"location")
                    if not location:
                        raise FetchRefused(f"{url}: a redirect without a location")
                    url = urljoin(url, location.decode("latin-1"))
                    continue
                if response.status != 200:
                    raise FetchRefused(f"{url}: status {response.status}")
                # Media types are case-insensitive (`Text/HTML` is `text/html`).
                kind = dict((k.lower(), v) for k, v in response.headers).get(b"content-type", b"").decode(
                    "latin-1").lower()
                body = await _read_capped(response)
            data, cut = body
            text = decode_text(data, cut)
            return html_to_text(text) if "html" in kind or not kind else text if kind.startswith("text/") \
                else ""
        raise FetchRefused(f"more than {MAX_REDIRECTS} redirects")

    async def aclose(self) -> None:
        await self._pool.aclose()


async def _read_capped(response: httpcore.Response) -> tuple[bytes, bool]:
    """At most MAX_PAGE_BYTES of the body, and whether it was cut (the rest is never read)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_stream():  # type: ignore[union-attr]
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_PAGE_BYTES:
            return b"".join(chunks)[:MAX_PAGE_BYTES], True
    return b"".join(chunks), False

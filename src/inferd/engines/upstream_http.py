"""The HTTP client of the `openai` engine, behind one small interface: the lean HTTP/1.1 pool of
engines/http1.py for plain-http upstreams (every engine call's hop), aiohttp for the rest (https,
credentials in the URL, multipart uploads), each raising `UpstreamUnreachable`, `UpstreamBroke`
or `asyncio.TimeoutError`."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp

from inferd.engines.http1 import HTTP1Pool, UpstreamBroke, UpstreamUnreachable

__all__ = ["UpstreamBroke", "UpstreamHTTP", "UpstreamReply", "UpstreamUnreachable", "retry_after_seconds"]


def retry_after_seconds(value: str | None) -> int:
    """An upstream's `Retry-After` (seconds or an HTTP date) as whole seconds, at least 1; 1 when
    it sent none or one that does not parse."""
    if value:
        value = value.strip()
        if value.isdigit():
            return max(1, int(value))
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return 1
        if when.tzinfo is not None:
            return max(1, math.ceil((when - datetime.now(timezone.utc)).total_seconds()))
    return 1


class UpstreamReply(Protocol):
    """An answer whose head has arrived."""

    status: int
    headers: dict[str, str]  # lower-case names

    async def read(self) -> bytes:
        """The whole body; the connection goes back to its pool."""

    def pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives."""

    def release(self) -> None:
        """Done with the answer (the connection is kept when the body ended)."""

    def close(self) -> None:
        """Drop the connection: the upstream sees the client go."""


@contextmanager
def _upstream_errors() -> Iterator[None]:
    """aiohttp's errors as this module's: a timeout stays a timeout (aiohttp's are ClientErrors
    too), a refused or unresolvable connect is `UpstreamUnreachable`, the rest `UpstreamBroke`."""
    try:
        yield
    except asyncio.TimeoutError:
        raise
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}") from None
    except aiohttp.ClientError as exc:
        raise UpstreamBroke(f"{type(exc).__name__}: {exc}") from None


class _AiohttpReply:
    """aiohttp's response as an `UpstreamReply`."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = {name.lower(): value for name, value in response.headers.items()}

    async def read(self) -> bytes:
        try:
            with _upstream_errors():
                return await self._response.read()
        finally:
            self._response.release()

    async def pieces(self) -> AsyncIterator[bytes]:
        with _upstream_errors():
            async for piece in self._response.content.iter_any():
                yield piece

    def release(self) -> None:
        self._response.release()

    def close(self) -> None:
        self._response.close()


class UpstreamHTTP:
    """Requests to one upstream. `headers` go on every request (Content-Type, Authorization)."""

    def __init__(self, base_url: str, headers: dict[str, str], connect_timeout: float, read_timeout: float) -> None:
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        self._session: aiohttp.ClientSession | None = None
        parts = urlsplit(base_url)
        self._lean: HTTP1Pool | None = None
        plain = all("\r" not in f"{k}{v}" and "\n" not in f"{k}{v}" for k, v in headers.items())
        if parts.scheme == "http" and parts.hostname and "@" not in parts.netloc and plain:
            self._lean = HTTP1Pool(parts.hostname, parts.port or 80, connect_timeout, read_timeout)
            fixed = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            self._fixed = f"Host: {self._lean.host_header}\r\n{fixed}Accept-Encoding: identity\r\n"
        self._heads: dict[tuple[str, str], bytes] = {}

    def _aiohttp(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    def _head(self, method: str, url: str) -> bytes:
        """The request line and the fixed headers for `method url` (built once)."""
        head = self._heads.get((method, url))
        if head is None:
            parts = urlsplit(url)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            head = self._heads[(method, url)] = f"{method} {target} HTTP/1.1\r\n{self._fixed}".encode("latin-1")
        return head

    async def request(self, method: str, url: str, body: bytes | None = None,
                      request_id: str | None = None, trace: dict[str, str] | None = None) -> UpstreamReply:
        """`method url` with `body`, up to the answer's head; `trace`: the attempt's trace headers."""
        if self._lean is not None:
            parts = [self._head(method, url)]
            if request_id is not None:
                parts.append(b"x-request-id: %s\r\n" % request_id.encode("latin-1"))
            if trace is not None:
                parts.append("".join(f"{name}: {value}\r\n" for name, value in trace.items()).encode("latin-1"))
            parts.append(b"Content-Length: %d\r\n\r\n" % len(body) if body is not None else b"\r\n")
            if body is not None:
                parts.append(body)
            return await self._lean.request(b"".join(parts))  # the body copied once, not per part
        headers = self._headers if request_id is None else {**self._headers, "x-request-id": request_id}
        if trace is not None:
            headers = {**headers, **trace}
        return await self._aiohttp_request(method, url, data=body, headers=headers)

    async def post_form(self, url: str, form: aiohttp.FormData, request_id: str | None = None,
                        trace: dict[str, str] | None = None) -> UpstreamReply:
        """A multipart POST (aiohttp writes the form); the form sets its own Content-Type."""
        headers = {k: v for k, v in self._headers.items() if k != "Content-Type"}
        if request_id is not None:
            headers["x-request-id"] = request_id
        if trace is not None:
            headers.update(trace)
        return await self._aiohttp_request("POST", url, data=form, headers=headers)

    async def _aiohttp_request(self, method: str, url: str, **kwargs: Any) -> UpstreamReply:
        with _upstream_errors():
            return _AiohttpReply(await self._aiohttp().request(method, url, **kwargs))

    async def close(self) -> None:
        """Close every connection."""
        if self._lean is not None:
            await self._lean.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

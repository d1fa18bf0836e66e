"""Iterating an SSE response: frames decoded to objects until `[DONE]`, error frames raised."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Callable, Generic, Iterator, TypeVar

import httpx

from inferd_client._errors import APIConnectionError
from inferd_client._sse import aiter_events, decode_frame, iter_events

T = TypeVar("T")


def _ended_early() -> APIConnectionError:
    return APIConnectionError("the stream ended before its [DONE] terminator")


@contextlib.contextmanager
def _reading() -> Iterator[None]:
    """Around the reading of a stream: a connection that breaks is an `APIConnectionError`."""
    try:
        yield
    except httpx.TransportError as exc:
        raise APIConnectionError(f"the stream broke: {exc}") from exc


class Stream(Generic[T]):
    """A streamed reply: iterate it for decoded frames; use it as a context manager (or call
    `close()`) to release the connection when you stop early.

    Iteration stops at `data: [DONE]`. An error frame (`{error: {message, type, code}}`) raises
    `StreamError`; a connection that breaks or closes before `[DONE]` raises `APIConnectionError`.
    """

    def __init__(self, response: httpx.Response, decode: Callable[[Any], T]) -> None:
        self.response = response
        self._decode = decode

    def __iter__(self) -> Iterator[T]:
        try:
            with _reading():
                for event in iter_events(self.response.iter_bytes()):
                    if (payload := decode_frame(event)) is None:
                        return
                    yield self._decode(payload)
        finally:
            self.response.close()
        raise _ended_early()

    def close(self) -> None:
        """Release the connection (the server sees the client leave)."""
        self.response.close()

    def __enter__(self) -> "Stream[T]":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class AsyncStream(Generic[T]):
    """The async twin of `Stream`: `async for` over it, `async with` to release it early."""

    def __init__(self, response: httpx.Response, decode: Callable[[Any], T]) -> None:
        self.response = response
        self._decode = decode

    async def __aiter__(self) -> AsyncIterator[T]:
        try:
            with _reading():
                async for event in aiter_events(self.response.aiter_bytes()):
                    if (payload := decode_frame(event)) is None:
                        return
                    yield self._decode(payload)
        finally:
            await self.response.aclose()
        raise _ended_early()

    async def close(self) -> None:
        """Release the connection."""
        await self.response.aclose()

    async def __aenter__(self) -> "AsyncStream[T]":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

"""What `Client` and `AsyncClient` do alike: their settings, building each request, deciding whether a
failure is retried (and after how long), a raw call, another key, and the batch wait's bookkeeping.

Each client keeps only what differs between them: sending (`httpx.Client` or `httpx.AsyncClient`),
sleeping, reading an error's body, closing.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Generic, Iterator, Mapping, Self, TypeVar

import httpx

from inferd_client._calls import Call
from inferd_client._config import Settings, poll_intervals
from inferd_client._conversation_types import GenerateChunk, GenerateEvent, GenerateStart
from inferd_client._errors import APIConnectionError, APITimeoutError, WaitTimeout, error_from_response, \
    parse_retry_after
from inferd_client._retry import RetryPolicy
from inferd_client._types import Batch

R = TypeVar("R")
HTTP = TypeVar("HTTP", httpx.Client, httpx.AsyncClient)
GenerateFrame = GenerateStart | GenerateChunk | GenerateEvent


class ClientBase(Generic[HTTP]):
    """The state and decisions both clients share; `HTTP` is the httpx client they send with."""

    def __init__(self, base_url: str | None, api_key: str | None, timeout: float, max_attempts: int | None,
                 retry: RetryPolicy | None, headers: Mapping[str, str] | None, http_client: HTTP | None,
                 new_http: Callable[..., HTTP]) -> None:
        self._settings = Settings.build(base_url, api_key, timeout, max_attempts, retry)
        self.base_url = self._settings.base_url
        self.retry = self._settings.retry
        self._owns_http = http_client is None
        self._http: HTTP = http_client or new_http(timeout=timeout)
        self._headers = self._settings.headers(headers)

    def _request(self, call: Call[Any], upload: Any) -> httpx.Request:
        return self._http.build_request(**self._settings.request_args(call, self._headers, upload))

    def _delay_after_transport_error(self, call: Call[Any], exc: httpx.TransportError, attempt: int) -> float:
        """How long to wait before sending `call` again after `exc`; raises the client's error instead when
        the call is not retried (a write, or the policy's attempts spent)."""
        error = (APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError)(
            f"{call.method} {call.path}: {exc or type(exc).__name__}")
        delay = self.retry.delay_after_connection_error(attempt) if call.read else None
        if delay is None:
            raise error from exc
        return delay

    def _delay_after_status(self, call: Call[Any], response: httpx.Response, attempt: int) -> float:
        """How long to wait before sending `call` again after an error status (its body already read);
        raises the status's error instead when the call is not retried."""
        failure = error_from_response(response)
        delay = (self.retry.delay_after_status(attempt, response.status_code,
                                               parse_retry_after(response.headers.get("retry-after")))
                 if call.read else None)
        if delay is None:
            raise failure
        return delay

    def with_api_key(self, api_key: str) -> Self:
        """A client sharing this one's settings and connection pool, with another key (for example a user key)."""
        other = type(self)(self.base_url, api_key, timeout=self._settings.timeout,  # type: ignore[call-arg]
                           retry=self.retry, http_client=self._http)
        other._headers = {**self._headers, "Authorization": f"Bearer {api_key}"}
        return other


def raw_call(method: str, path: str, params: Mapping[str, Any] | None, json: Any, data: Mapping[str, str] | None,
             read: bool | None) -> Call[httpx.Response]:
    """The `Call` of `request()`: any route, its response as it came; a read (retried) when `read`, by default
    when the method is GET."""
    method = method.upper()
    return Call(method, path, lambda r: r, read=method == "GET" if read is None else read, params=params,
                json=json, data=data)


class BatchWait:
    """One `wait_batch`: its poll schedule, deadline and progress callback, between the client's polls."""

    def __init__(self, batch_id: str, poll_interval: float, max_interval: float, timeout: float | None,
                 on_progress: Callable[[Batch], None] | None) -> None:
        self._batch_id = batch_id
        self._timeout = timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._intervals: Iterator[float] = poll_intervals(poll_interval, max_interval)  # checked at the first wait
        self._on_progress = on_progress

    def delay_after(self, batch: Batch) -> float | None:
        """How long to sleep before the next poll, None once `batch` is terminal; raises `WaitTimeout`
        when that sleep would end past the deadline."""
        if self._on_progress is not None:
            self._on_progress(batch)
        if not batch.is_live:
            return None
        delay = next(self._intervals)
        if self._deadline is not None and time.monotonic() + delay > self._deadline:
            raise WaitTimeout(f"batch {self._batch_id} still {batch.status} after {self._timeout} s", batch)
        return delay

"""What `Client` and `AsyncClient` share: settings, request building, uploads, poll intervals."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from inferd_client._calls import Call, Upload
from inferd_client._retry import RetryPolicy

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
USER_AGENT = "inferd-client/0.1"


@dataclass(frozen=True)
class Settings:
    """A client's base URL, key, timeout and retry policy."""

    base_url: str
    api_key: str | None
    timeout: float
    retry: RetryPolicy

    @classmethod
    def build(cls, base_url: str | None, api_key: str | None, timeout: float, max_attempts: int | None,
              retry: RetryPolicy | None) -> "Settings":
        """Defaults from `INFERD_BASE_URL` / `INFERD_API_KEY` when not given; a trailing `/v1` is dropped
        (every path of the spec already starts with `/v1`)."""
        url = (base_url or os.environ.get("INFERD_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        policy = retry or RetryPolicy()
        if max_attempts is not None:
            policy = replace(policy, max_attempts=max_attempts)
        key = api_key if api_key is not None else os.environ.get("INFERD_API_KEY")
        return cls(url, key, timeout, policy)

    def headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        """Headers sent on every request."""
        values = {"User-Agent": USER_AGENT, **(extra or {})}
        if self.api_key:
            values["Authorization"] = f"Bearer {self.api_key}"
        return values

    def request_args(self, call: Call[Any], headers: Mapping[str, str], upload: Any) -> dict[str, Any]:
        """Keyword arguments of `httpx.Client.build_request` for `call`."""
        args: dict[str, Any] = {"method": call.method, "url": self.base_url + call.path,
                                "headers": {**headers, **call.extra_headers}, "params": call.params}
        if call.json is not None:
            args["json"] = call.json
        if call.data is not None:
            args["data"] = call.data
        if upload is not None:
            args["files"] = {call.upload.field: upload} if call.upload else None
        if call.timeout is not None:
            args["timeout"] = call.timeout
        return args


@contextlib.contextmanager
def open_upload(upload: Upload | None) -> Iterator[Any]:
    """The httpx file tuple of an upload; a path is opened (streamed, never read whole) and closed after."""
    if upload is None:
        yield None
        return
    source = upload.source
    name = upload.filename()
    if isinstance(source, tuple):
        source = source[1]
    if isinstance(source, (str, os.PathLike)):
        with open(Path(source), "rb") as handle:
            yield (name, handle, upload.content_type)
        return
    yield (name, source, upload.content_type)


def poll_intervals(first: float, cap: float) -> Iterator[float]:
    """`first`, doubling, never above `cap`: the wait helper's schedule (5 s to 30 s by default)."""
    if first <= 0 or cap < first:
        raise ValueError("poll intervals need 0 < poll_interval <= max_interval")
    delay = first
    while True:
        yield delay
        delay = min(cap, delay * 2)

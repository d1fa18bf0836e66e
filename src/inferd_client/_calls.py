"""What each route sends and how its reply is read, shared by `Client` and `AsyncClient`.

A builder checks what the spec asks the client to check locally (before any request), then
returns a `Call`: method, path, body, whether it is a read (retried) and how to parse the reply.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any, Callable, Generic, Mapping, Sequence, TypeVar, Union
from urllib.parse import quote

import httpx

from inferd_client._base import APIObject
from inferd_client._errors import ClientValidationError, error_from_parts

R = TypeVar("R")
O = TypeVar("O", bound=APIObject)

BATCH_PURPOSE = "batch"
BATCH_ENDPOINT = "/v1/chat/completions"
BATCH_WINDOW = "24h"
BATCH_LIST_LIMIT = (1, 100)
METADATA_LIMITS = (16, 64, 512)  # pairs, key length, value length (chat and batch metadata)
IMAGE_TIMEOUT = 600.0  # image generation holds the request open until the images are ready

FileSource = Union[str, "os.PathLike[str]", bytes, IO[bytes], tuple[str, Union[bytes, IO[bytes]]]]


class NotGiven:
    """Marks an argument the caller left out (None can be a meaningful value, as in `project_id=None`)."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = NotGiven()


@dataclass(frozen=True)
class Upload:
    """A multipart file part: a path opened only while sending, or bytes / a file object."""

    field: str
    source: FileSource
    content_type: str = "application/octet-stream"

    def filename(self) -> str:
        """The name the server sees."""
        if isinstance(self.source, tuple):
            return self.source[0]
        if isinstance(self.source, (str, os.PathLike)):
            return Path(self.source).name
        if isinstance(self.source, bytes):
            return "upload"
        return Path(str(getattr(self.source, "name", "upload"))).name


@dataclass(frozen=True)
class Call(Generic[R]):
    """One request and the parser of its successful reply."""

    method: str
    path: str
    parse: Callable[[httpx.Response], R]
    read: bool = False
    params: Mapping[str, Any] | None = None
    json: Any = None
    data: Mapping[str, str] | None = None
    upload: Upload | None = None
    timeout: float | None = None
    extra_headers: Mapping[str, str] = field(default_factory=dict)


def segment(value: str | int) -> str:
    """A path segment, percent-encoded so an id can never change the route."""
    return quote(str(value), safe="")


def body_json(response: httpx.Response) -> Any:
    """The decoded body; a 2xx carrying the application envelope `{success: false}` is still an error."""
    body = response.json()
    if isinstance(body, dict) and body.get("success") is False:
        raise error_from_parts(response.status_code, body, response.headers)
    return body


def as_object(cls: type[O]) -> Callable[[httpx.Response], O]:
    """A parser building `cls` from the JSON body."""
    return lambda response: cls.from_dict(body_json(response))


def as_bytes(response: httpx.Response) -> bytes:
    """The raw body (audio, file content)."""
    return response.content


def clean(values: Mapping[str, Any]) -> dict[str, Any]:
    """Drop arguments that were not given."""
    return {k: v for k, v in values.items() if v is not None and not isinstance(v, NotGiven)}


def check_metadata(metadata: Mapping[str, str] | None) -> None:
    """Chat and batch metadata limits: 16 pairs, keys up to 64 characters, values up to 512."""
    if metadata is None:
        return
    pairs, key_len, value_len = METADATA_LIMITS
    if not isinstance(metadata, Mapping) or len(metadata) > pairs:
        raise ClientValidationError(f"metadata: at most {pairs} string pairs")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ClientValidationError("metadata: keys and values must be strings")
        if len(key) > key_len or len(value) > value_len:
            raise ClientValidationError(f"metadata: keys up to {key_len} characters, values up to {value_len}")


def check_batch_list_limit(limit: int) -> None:
    """`limit` of `GET /v1/batches` is 1..100, checked before any request."""
    low, high = BATCH_LIST_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not low <= limit <= high:
        raise ClientValidationError(f"limit must be an integer from {low} to {high}, got {limit!r}")


def timestamp(value: str | date | datetime | None) -> str | None:
    """A usage window bound as the server reads it (RFC 3339 or YYYY-MM-DD)."""
    if value is None or isinstance(value, str):
        return value
    return value.isoformat()


def usage_params(filters: Mapping[str, Any]) -> dict[str, Any]:
    """Query parameters of both usage routes; `metadata` is sent as URL-encoded JSON."""
    params = clean(filters)
    if "from_" in params:
        params["from"] = timestamp(params.pop("from_"))
    if "to" in params:
        params["to"] = timestamp(params["to"])
    if "metadata" in params and not isinstance(params["metadata"], str):
        params["metadata"] = json.dumps(params["metadata"], separators=(",", ":"))
    return params


def check_file_purpose(purpose: str) -> None:
    """Only `batch` files can be uploaded."""
    if purpose != BATCH_PURPOSE:
        raise ClientValidationError(f"purpose must be {BATCH_PURPOSE!r}, got {purpose!r}")


def check_batch_create(endpoint: str, completion_window: str, metadata: Mapping[str, str] | None) -> None:
    """Endpoint, window and metadata of `POST /v1/batches`, checked before any request."""
    if endpoint != BATCH_ENDPOINT:
        raise ClientValidationError(f"endpoint must be {BATCH_ENDPOINT!r}, got {endpoint!r}")
    if completion_window != BATCH_WINDOW:
        raise ClientValidationError(f"completion_window must be {BATCH_WINDOW!r}, got {completion_window!r}")
    check_metadata(metadata)


def check_batch_id(batch_id: str) -> None:
    """A batch or file id must be a non-empty string."""
    if not isinstance(batch_id, str) or not batch_id:
        raise ClientValidationError("an id must be a non-empty string")


def exchange_body(idp_token: str | None, api_key: str | None, ttl_seconds: int | None) -> dict[str, Any]:
    """Shape A (`idp_token`, with the application key in the header) or shape B (`api_key` in the body)."""
    if (idp_token is None) == (api_key is None):
        raise ClientValidationError("give exactly one of idp_token (shape A) or api_key (shape B)")
    if idp_token is not None:
        return clean({"idp_token": idp_token, "ttl_seconds": ttl_seconds})
    if ttl_seconds is not None:
        raise ClientValidationError("ttl_seconds applies to the idp_token shape only")
    return {"api_key": api_key}


def messages_list(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as plain dicts (the server checks their shape)."""
    return [dict(m) for m in messages]

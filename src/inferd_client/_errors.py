"""One exception tree for the client: local mistakes, transport failures and API errors by status."""

from __future__ import annotations

import json
from typing import Any

import httpx


class InferdClientError(Exception):
    """Base of every error this library raises."""


class ClientValidationError(InferdClientError, ValueError):
    """A request was refused locally, before anything was sent (bad purpose, endpoint, window, limit)."""


class APIConnectionError(InferdClientError):
    """The server could not be reached, or the connection broke before a reply arrived."""


class APITimeoutError(APIConnectionError):
    """The server did not answer within the client's timeout."""


class WaitTimeout(InferdClientError, TimeoutError):
    """`wait_batch` gave up before the batch reached a terminal status."""

    def __init__(self, message: str, batch: Any) -> None:
        super().__init__(message)
        self.batch = batch


class APIError(InferdClientError):
    """The server answered with an error: HTTP status, error `type`, `code` and `message`.

    `code` is usually a string (`rate_limit_exceeded`), but errors relayed from a model keep the
    upstream's numeric status there (the spec), so check its type before treating it as text.
    """

    def __init__(self, message: str, *, status: int | None, type: str | None = None, code: str | int | None = None,
                 param: str | None = None, body: Any = None, headers: httpx.Headers | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.type, self.code, self.param = message, status, type, code, param
        self.body = body  # the decoded error body (or its text when it is not JSON)
        self.headers = headers if headers is not None else httpx.Headers()

    def __str__(self) -> str:
        parts = [str(self.status)] if self.status is not None else []
        parts += [p for p in (self.type, str(self.code) if self.code is not None else None) if p]
        return f"{self.message} ({', '.join(parts)})" if parts else self.message


class BadRequestError(APIError):
    """400: malformed JSON, unknown field, value out of range, input over the context window."""


class AuthenticationError(APIError):
    """401: key missing, malformed, revoked or expired."""


class BudgetExceededError(APIError):
    """402: the key's or org's monthly budget is spent."""


class PermissionDeniedError(APIError):
    """403: model not allowed for the org, or key type not permitted on the route."""


class NotFoundError(APIError):
    """404: unknown route, model, file, batch or conversation."""


class MethodNotAllowedError(APIError):
    """405: the route exists but not with this method."""


class PayloadTooLargeError(APIError):
    """413: an upload over its size cap."""


class UnprocessableEntityError(APIError):
    """422: the key exchange body failed validation."""


class RateLimitError(APIError):
    """429: too many requests per minute; `retry_after` holds the server's `Retry-After` seconds."""

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked the client to wait, when it said."""
        return parse_retry_after(self.headers.get("retry-after"))


class InternalServerError(APIError):
    """5xx: timeout, engine failure, transient server trouble."""


class StreamError(APIError):
    """An error frame inside an SSE stream (for example type `engine_error`, code `timeout`)."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError, 401: AuthenticationError, 402: BudgetExceededError, 403: PermissionDeniedError,
    404: NotFoundError, 405: MethodNotAllowedError, 413: PayloadTooLargeError, 422: UnprocessableEntityError,
    429: RateLimitError,
}


def parse_retry_after(value: str | None) -> float | None:
    """A `Retry-After` header in seconds (the service sends integers; HTTP dates are not used)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return max(0.0, seconds)


def _decode(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return content.decode("utf-8", "replace")


def error_from_parts(status: int | None, body: Any, headers: httpx.Headers | None = None,
                     cls: type[APIError] | None = None) -> APIError:
    """Build the right exception for a status and a decoded body.

    Understands the API envelope `{error: {message, type, code, param?}}`, the application
    envelope of conversation and source routes `{success: false, message, code?}`, and plain text.
    """
    if cls is None:
        cls = _BY_STATUS.get(status or 0) or (InternalServerError if (status or 0) >= 500 else APIError)
    message, type_, code, param = f"HTTP {status}", None, None, None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        message = str(error.get("message") or message)
        type_, code, param = error.get("type"), error.get("code"), error.get("param")
    elif isinstance(body, dict) and body.get("success") is False:
        message = str(body.get("message") or message)
        code = body.get("code")
    elif isinstance(body, dict) and isinstance(body.get("error"), str):
        message = body["error"]
    elif isinstance(body, str) and body.strip():
        message = body.strip()[:2000]
    return cls(message, status=status, type=type_ if isinstance(type_, str) else None, code=code,
               param=param if isinstance(param, str) else None, body=body, headers=headers)


def error_from_response(response: httpx.Response) -> APIError:
    """The exception for an error response whose body has been read."""
    return error_from_parts(response.status_code, _decode(response.content), response.headers)

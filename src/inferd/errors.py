"""One exception tree. Each class knows its HTTP status, error `type` and `code`.

Errors are raised, never returned; `app.py` maps them to the wire envelope in one place
(`{error: {message, type, code}}`).
"""

from __future__ import annotations

import logging
from typing import Any, Self

import orjson

_engine_log = logging.getLogger("inferd.engines")


class InferdError(Exception):
    """Base of every error the API reports to a client."""

    status: int = 500
    type: str = "server_error"
    code: str = "internal_error"
    usage: Any = None  # the usage row (metering.Usage) of a failed engine call, set by the call stage
    # Refusals counted by `inferd_rejections_total{reason}`; None for the rest.
    rejection: str | None = None

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param
        self.headers = headers or {}

    def envelope(self) -> dict[str, Any]:
        """The error object as the wire shows it."""
        error: dict[str, Any] = {"message": self.message, "type": self.type, "code": self.code}
        if self.param is not None:
            error["param"] = self.param
        return {"error": error}

    def body(self) -> bytes:
        """The JSON response body."""
        return orjson.dumps(self.envelope())

    def app_body(self) -> bytes:
        """The application envelope of the conversation and source routes."""
        return orjson.dumps({"success": False, "message": self.message, "code": self.code})


class InvalidRequest(InferdError):
    status, type, code = 400, "invalid_request_error", "invalid_request"


class UnreadableFile(InvalidRequest):
    """An uploaded file whose text cannot be extracted (damaged, encrypted, of another type)."""

    code = "unreadable_file"

    def __init__(self, why: str) -> None:
        super().__init__(f"The file could not be read: {why}", param="file")


class AuthenticationFailed(InferdError):
    status, type, code = 401, "authentication_error", "invalid_api_key"
    rejection = "authentication"


class BudgetExceeded(InferdError):
    status, type, code = 402, "billing_error", "budget_exceeded"
    rejection = "budget"


class PermissionDenied(InferdError):
    status, type, code = 403, "permission_error", "permission_denied"


class AdminKeyRequired(PermissionDenied):
    """An application or user key on a /v1/admin route."""

    code = "admin_key_required"

    def __init__(self) -> None:
        super().__init__("This route takes an admin key (inferd keys create --type admin)")


class UserAlreadyLinked(PermissionDenied):
    """A key bound to a user that an idp subject already owns:
    such a key mints that user's keys on the exchange's second shape and reads their conversations."""

    code = "user_already_linked"

    def __init__(self, email: str) -> None:
        super().__init__(f"The user '{email}' already signs in through the identity provider: a key bound to "
                         "them could act as them", param="user_email")


class OperatorLimit(PermissionDenied):
    """An admin key reaching past what the operator (the command line) set for its org: widening the
    org's models beyond the operator's list, or setting or lifting the org's budget."""

    code = "operator_limit"


class NotFound(InferdError):
    status, type, code = 404, "not_found_error", "not_found"


class Conflict(InferdError):
    """A change the current state refuses: a team name already taken, a team that keys still belong to."""

    status, type, code = 409, "invalid_request_error", "conflict"


class MethodNotAllowed(InferdError):
    status, type, code = 405, "invalid_request_error", "method_not_allowed"


class Unprocessable(InferdError):
    """A body that failed validation on POST /v1/auth/exchange, the one 422 route."""

    status, type, code = 422, "invalid_request_error", "validation_error"


class _ClosesConnection(InferdError):
    """Refuses a body before it is read whole: the connection closes after the answer, so the
    server never reads the rest of the body."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.headers.setdefault("Connection", "close")


class PayloadTooLarge(_ClosesConnection):
    status, type, code = 413, "invalid_request_error", "request_too_large"


class RequestTimeout(_ClosesConnection):
    """The request body arrived slower than the server waits for."""

    status, type, code = 408, "invalid_request_error", "request_timeout"


class RateLimited(InferdError):
    status, type, code = 429, "rate_limit_error", "rate_limit_exceeded"
    rejection = "rate_limit"

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"Rate limit exceeded: retry after {retry_after} s",
                         headers={"Retry-After": str(retry_after)})
        self.retry_after = retry_after


class ServiceUnavailable(InferdError):
    status, type, code = 503, "server_error", "service_unavailable"


class ModelOverloaded(ServiceUnavailable):
    """Every deployment of the model was at `max_in_flight` for `queue_timeout_s`."""

    code = "model_overloaded"
    rejection = "overloaded"

    def __init__(self, waited_s: float) -> None:
        retry_after = max(1, min(int(waited_s), 30))
        super().__init__(f"The model is overloaded: no deployment had room within {waited_s:g} s; retry after "
                         f"{retry_after} s", headers={"Retry-After": str(retry_after)})


class EngineError(InferdError):
    """The engine failed (5xx, broken connection, bad reply).

    The message names the model, never an upstream's host, port or URL, a file path, or an
    exception's text that may hold them: clients are not told how the deployment is wired.
    """

    status, type, code = 502, "engine_error", "upstream_error"

    @classmethod
    def concealing(cls, message: str, detail: object, *, code: str | None = None) -> Self:
        """The error with `message` for the client; `detail` (addresses, paths, exception text)
        goes only to the operators' log, so the failure can still be diagnosed."""
        _engine_log.warning("%s: %s", message, detail)
        return cls(message, code=code)


class EngineUnavailable(EngineError):
    status, code = 503, "engine_unavailable"


class EngineTimeout(EngineError):
    status, code = 504, "timeout"


class EngineCredentialsRefused(EngineError):
    """The upstream answered 401 or 403: the gateway's configured `api_key` is wrong. Not relayed,
    which would make the client believe its own key was refused."""

    code = "upstream_auth_failed"


class RelayedError(InferdError):
    """A request the model itself rejected: status and body are passed through as they came."""

    type = "engine_error"

    def __init__(self, status: int, raw_body: bytes, content_type: str = "application/json",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"upstream answered {status}", headers=headers)
        self.status = status
        self.raw_body = raw_body
        self.content_type = content_type

    def body(self) -> bytes:
        """The upstream's body when it is a JSON error object, else wrapped in our envelope."""
        try:
            parsed = orjson.loads(self.raw_body)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            if isinstance(parsed.get("error"), dict):
                return self.raw_body
            # vLLM answers a flat `{object: "error", message, type, param, code}`: wrap it so
            # clients always find `error`, keeping the upstream's own fields.
            return orjson.dumps({"error": parsed})
        text = self.raw_body.decode("utf-8", "replace")[:2000]
        return orjson.dumps({"error": {"message": text or self.message, "type": "engine_error",
                                       "code": self.status}})


class ConfigError(Exception):
    """A configuration file or environment value is wrong; raised at start, never over HTTP."""


# SQLSTATEs of text PostgreSQL cannot hold: 22021 character_not_in_repertoire (a NUL in text),
# 22P05 untranslatable_character (\u0000 in jsonb).
_UNSTORABLE_TEXT = ("22021", "22P05")


def refused_text(exc: BaseException) -> InvalidRequest | None:
    """The 400 for a database error that a client's NUL character caused, else None. PostgreSQL
    holds no NUL in text or jsonb and refuses a query carrying one (a path id, a query parameter,
    a body field): the request's fault, where SQLite simply finds nothing."""
    if getattr(getattr(exc, "orig", None), "sqlstate", None) in _UNSTORABLE_TEXT:
        return InvalidRequest("The request carries a NUL character (\\u0000), which no identifier or "
                              "stored text may hold")
    return None

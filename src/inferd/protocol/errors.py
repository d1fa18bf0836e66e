"""Wire schemas of the error envelopes, for /openapi.json (docs/api.md, Errors): the one every route
answers in, and the conversation and source routes' own. Anthropic's is in `protocol/messages.py`.
`errors.InferdError.envelope` and `app_body` write them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class APIError(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, billing_error, permission_error, "
                                  "not_found_error, rate_limit_error, engine_error or server_error.")
    code: str | None = Field(description="What went wrong, more precisely than the status (docs/api.md, Errors).")
    param: str | None = Field(None, description="The request field at fault, as a path: `messages[0].role`.")


class APIErrorEnvelope(BaseModel):
    error: APIError


class AppErrorEnvelope(BaseModel):
    """The conversation and source routes' envelope."""

    success: Literal[False]
    message: str
    code: str

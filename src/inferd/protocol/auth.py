"""Wire schemas of POST /v1/auth/exchange (both shapes)."""

from __future__ import annotations

from pydantic import BaseModel


class ExchangeRequest(BaseModel):
    """Shape A sends `idp_token` (with an application key in the header); shape B sends `api_key`."""

    idp_token: str | None = None
    api_key: str | None = None
    ttl_seconds: int | None = None


class ExchangeResponse(BaseModel):
    """The minted user key (shape A's `data`)."""

    access_key_id: str
    secret: str
    full_key: str
    expires_at: str
    user_id: str
    org_id: int


class ExchangeEnvelope(BaseModel):
    """Shape A's response."""

    success: bool
    data: ExchangeResponse


class ApiKeyExchangeResponse(BaseModel):
    """Shape B's response."""

    success: bool
    user_key: str
    expires_at: str

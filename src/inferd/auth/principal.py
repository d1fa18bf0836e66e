"""The principal of a request: the key behind `Authorization`, checked for the route."""

from __future__ import annotations

from inferd.auth.key_lookup import KeyLookup
from inferd.auth.key_record import KeyRecord
from inferd.auth.keys import parse_bearer, secret_matches
from inferd.errors import AdminKeyRequired, AuthenticationFailed, PermissionDenied
from inferd.observe.requests import current
from inferd.store.db import utcnow


class Authenticator:
    """Turns an `Authorization` header into the caller's key record, or raises 401."""

    def __init__(self, keys: KeyLookup) -> None:
        self._keys = keys

    async def authenticate(self, authorization: str | None) -> KeyRecord:
        """The live key the header names; 401 when missing, malformed, unknown, revoked or expired."""
        parsed = parse_bearer(authorization)
        if parsed is None:
            if not authorization:
                raise AuthenticationFailed("Missing API key: send 'Authorization: Bearer ACCESS_KEY_ID:SECRET'",
                                           code="missing_api_key")
            raise AuthenticationFailed("Malformed API key: expected 'ACCESS_KEY_ID:SECRET'", code="invalid_api_key")
        access_key_id, secret = parsed
        record = await self._keys.lookup(access_key_id)
        if record is None or not _secret_ok(secret, record):
            raise AuthenticationFailed("Invalid API key", code="invalid_api_key")
        if record.revoked:
            raise AuthenticationFailed("API key revoked", code="key_revoked")
        if record.expires_at is not None and record.expires_at <= utcnow():
            raise AuthenticationFailed("API key expired", code="key_expired")
        note = current.get()
        if note is not None:  # for the access log
            note.key_id = record.access_key_id
            note.org = record.org_slug
        return record


def _secret_ok(secret: str, record: KeyRecord) -> bool:
    """The key's current secret, or the one a rotation replaced while its
    grace lasts. The current one is checked first: after the grace it is the only one asked."""
    if secret_matches(secret, record.secret_hash):
        return True
    until = record.previous_secret_until
    return (record.previous_secret_hash is not None and until is not None and utcnow() < until
            and secret_matches(secret, record.previous_secret_hash))


def require_long_lived(key: KeyRecord) -> None:
    """Application and admin keys only."""
    if key.type == "user":
        raise PermissionDenied("User keys work only on /v1/conversations and /v1/sources",
                               code="key_type_not_permitted")


def require_user_key(key: KeyRecord) -> None:
    """User keys only, on /v1/conversations* and /v1/sources*."""
    if key.type != "user" or key.user_id is None:
        raise PermissionDenied("This route takes a user-scoped key (POST /v1/auth/exchange mints one)",
                               code="user_key_required")


def require_admin(key: KeyRecord) -> None:
    """Admin keys only, on /v1/admin/*: any other type is 403 `admin_key_required`."""
    if key.type != "admin":
        raise AdminKeyRequired()

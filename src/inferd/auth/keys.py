"""Key material: minting, hashing, parsing the bearer token, constant-time comparison."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string

ACCESS_KEY_PREFIX = "IFDK"
ACCESS_KEY_LENGTH = 32
_ALPHABET = string.ascii_uppercase + string.digits
_HEX = frozenset("0123456789abcdefABCDEF")
_ID_CHARS = frozenset(_ALPHABET)


def mint() -> tuple[str, str]:
    """A new (access key id, secret): 32 characters with the service prefix, 64 hex characters."""
    body = "".join(secrets.choice(_ALPHABET) for _ in range(ACCESS_KEY_LENGTH - len(ACCESS_KEY_PREFIX)))
    return ACCESS_KEY_PREFIX + body, secrets.token_hex(32)


def hash_secret(secret: str) -> str:
    """The stored form of a secret. Secrets are 256 random bits, so one SHA-256 is enough."""
    return hashlib.sha256(secret.lower().encode("ascii")).hexdigest()


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Compare a presented secret with a stored hash in constant time."""
    return hmac.compare_digest(hash_secret(secret), stored_hash)


def parse_bearer(authorization: str | None) -> tuple[str, str] | None:
    """Split `Bearer ACCESS_KEY_ID:SECRET`; None when missing or malformed."""
    if not authorization or authorization[:7].lower() != "bearer ":
        return None
    token = authorization[7:].strip()
    access_key_id, sep, secret = token.partition(":")
    if (not sep or len(access_key_id) != ACCESS_KEY_LENGTH or not access_key_id.startswith(ACCESS_KEY_PREFIX)
            or not _ID_CHARS.issuperset(access_key_id) or len(secret) != 64 or not _HEX.issuperset(secret)):
        return None
    return access_key_id, secret

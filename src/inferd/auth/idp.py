"""Verification of identity-provider tokens (`idp_token` on POST /v1/auth/exchange).

The accepted algorithms are fixed by the configuration, never read from the token: an HS256
secret admits HS256 only, a JWKS file admits RS256 (RSA keys) and ES256 (P-256 keys), each key
only with its own algorithm, so an RSA public key can never be used as an HMAC secret and `none`
is never accepted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from inferd.config import IdpConfig
from inferd.errors import AuthenticationFailed, ConfigError

# Clock skew tolerated on exp and nbf, in seconds.
LEEWAY_SECONDS = 5
_JWKS_ALGORITHMS = {"RSA": "RS256", "EC": "ES256"}


@dataclass(frozen=True)
class IdpClaims:
    """What the exchange reads from a verified token."""

    subject: str
    email: str | None
    given_name: str | None
    family_name: str | None


def _optional_str(claims: dict[str, Any], name: str) -> str | None:
    value = claims.get(name)
    return value if isinstance(value, str) and value else None


class IdpVerifier:
    """Checks signature, issuer, audience, expiry and not-before of one identity provider's tokens."""

    def __init__(self, config: IdpConfig, base_dir: Path | None = None) -> None:
        self._issuer = config.issuer
        self._audience = config.audience
        self._secret = config.hs256_secret
        self._keys: list[tuple[str | None, str, Any]] = []  # (kid, algorithm, public key)
        if config.jwks_file:
            path = Path(config.jwks_file).expanduser()
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            self._keys = _load_jwks(path)
        elif not self._secret:
            raise ConfigError("[idp] needs hs256_secret or jwks_file")

    def verify(self, token: str) -> IdpClaims:
        """The claims of a valid token; AuthenticationFailed (401) for anything else."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"Invalid idp_token: {exc}", code="invalid_idp_token") from exc
        key, algorithm = self._key_for(header)
        options: dict[str, Any] = {"require": ["exp", "sub"], "verify_aud": self._audience is not None,
                                   "verify_iss": self._issuer is not None}
        try:
            claims = jwt.decode(token, key, algorithms=[algorithm], audience=self._audience, issuer=self._issuer,
                                leeway=LEEWAY_SECONDS, options=options)
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"Invalid idp_token: {exc}", code="invalid_idp_token") from exc
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > 256:
            raise AuthenticationFailed("Invalid idp_token: `sub` must be a non-empty string", code="invalid_idp_token")
        return IdpClaims(subject=subject, email=_optional_str(claims, "email"),
                         given_name=_optional_str(claims, "given_name"),
                         family_name=_optional_str(claims, "family_name"))

    def _key_for(self, header: dict[str, Any]) -> tuple[Any, str]:
        algorithm = header.get("alg")
        if self._secret:
            if algorithm != "HS256":
                raise AuthenticationFailed("Invalid idp_token: only HS256 is accepted", code="invalid_idp_token")
            return self._secret, "HS256"
        kid = header.get("kid")
        candidates = [k for k in self._keys if kid is None or k[0] == kid]
        if kid is None and len(self._keys) > 1:
            candidates = [k for k in candidates if k[1] == algorithm]
        for _kid, key_algorithm, public_key in candidates:
            if key_algorithm == algorithm:
                return public_key, key_algorithm
        raise AuthenticationFailed("Invalid idp_token: no key of the identity provider matches its kid and alg",
                                   code="invalid_idp_token")


def _load_jwks(path: Path) -> list[tuple[str | None, str, Any]]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        entries = document["keys"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"[idp] jwks_file {path}: not a readable JWKS document ({exc})") from exc
    keys: list[tuple[str | None, str, Any]] = []
    for entry in entries:
        algorithm = _JWKS_ALGORITHMS.get(entry.get("kty", ""))
        if algorithm is None or entry.get("alg", algorithm) != algorithm:
            continue  # symmetric or unknown keys in a JWKS file are ignored, never used as secrets
        try:
            public_key = jwt.PyJWK(entry, algorithm).key
        except jwt.PyJWTError as exc:
            raise ConfigError(f"[idp] jwks_file {path}: bad key {entry.get('kid')!r} ({exc})") from exc
        keys.append((entry.get("kid"), algorithm, public_key))
    if not keys:
        raise ConfigError(f"[idp] jwks_file {path}: no RS256 or ES256 key")
    return keys

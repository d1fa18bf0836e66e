"""Verification of identity-provider tokens (`idp_token` on POST /v1/auth/exchange).

The accepted algorithms are fixed by the configuration, never read from the token: an HS256
secret admits HS256 only, a JWKS file admits RS256 (RSA keys) and ES256 (P-256 keys), each key
only with its own algorithm, so an RSA public key can never be used as an HMAC secret and `none`
is never accepted. Issuer and audience are always required and checked: `[idp]` must name both
(a configuration error otherwise), so a token minted for another service never mints a key here.
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
    email_verified: bool  # only a JSON `true` counts: strings and numbers never link an email
    given_name: str | None
    family_name: str | None


def _optional_str(claims: dict[str, Any], name: str, max_length: int) -> str | None:
    # The users table's column widths: a longer value would fail the insert on PostgreSQL (a 500).
    value = claims.get(name)
    return value if isinstance(value, str) and 0 < len(value) <= max_length else None


class IdpVerifier:
    """Checks signature, issuer, audience, expiry and not-before of one identity provider's tokens."""

    def __init__(self, config: IdpConfig, base_dir: Path | None = None) -> None:
        if not config.issuer or not config.audience:
            # load_catalogue refuses this already; checked again so no verifier exists without them.
            raise ConfigError("[idp] needs issuer and audience")
        self._issuer: str = config.issuer
        self._audience: str = config.audience
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
        # Every check named, none left to PyJWT's defaults: a token without iss, aud, exp or sub fails.
        options: dict[str, Any] = {"require": ["iss", "aud", "exp", "sub"], "verify_signature": True,
                                   "verify_iss": True, "verify_aud": True, "verify_exp": True, "verify_nbf": True}
        try:
            claims = jwt.decode(token, key, algorithms=[algorithm], audience=self._audience, issuer=self._issuer,
                                leeway=LEEWAY_SECONDS, options=options)
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"Invalid idp_token: {exc}", code="invalid_idp_token") from exc
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > 256:
            raise AuthenticationFailed("Invalid idp_token: `sub` must be a non-empty string", code="invalid_idp_token")
        return IdpClaims(subject=subject, email=_optional_str(claims, "email", 320),
                         email_verified=claims.get("email_verified") is True,
                         given_name=_optional_str(claims, "given_name", 256),
                         family_name=_optional_str(claims, "family_name", 256))

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

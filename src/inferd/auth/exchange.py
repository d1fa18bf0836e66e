"""User-key exchange: mint short-lived user keys.

Shape A: an application key vouches for an identity-provider token; the user is resolved from
its `sub`. Shape B: a long-lived key owned by a user (`inferd keys create --user`) mints a key for
that user. Either way the minted key is of type `user`, lives in the parent key's org, expires,
and is charged to (and rate limited like) its parent. A shape-B mint is
recorded in the org's audit log (`user_key.mint`, actor the owning key, target the user), in the
same transaction as the key: whoever holds a key bound to a user can act as them, and the org's
admin sees each time it happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from inferd.auth.idp import IdpVerifier
from inferd.auth.key_record import KeyRecord
from inferd.auth.keys import hash_secret, mint
from inferd.auth.principal import Authenticator
from inferd.config import IdpConfig
from inferd.errors import PermissionDenied, ServiceUnavailable
from inferd.store.audit import AuditEntry
from inferd.store.db import iso, utcnow
from inferd.store.keys import KeyRepository
from inferd.store.users import UserRepository

DEFAULT_TTL_SECONDS = 3600
MIN_TTL_SECONDS = 60
MAX_TTL_SECONDS = 86400


@dataclass(frozen=True)
class MintedKey:
    """A freshly minted user key; the secret exists only here and in the response."""

    access_key_id: str
    secret: str
    expires_at: datetime
    user_id: int
    org_id: int

    @property
    def full_key(self) -> str:
        """The bearer token: `ACCESS_KEY_ID:SECRET`."""
        return f"{self.access_key_id}:{self.secret}"


def clamp_ttl(ttl_seconds: int | None) -> int:
    """The key's lifetime: default 3600 s, out-of-range values clamped to 60..86400, never rejected."""
    if ttl_seconds is None:
        return DEFAULT_TTL_SECONDS
    return max(MIN_TTL_SECONDS, min(MAX_TTL_SECONDS, ttl_seconds))


def refuse_user_key(key: KeyRecord) -> None:
    """No user key mints another, in either shape (403 off the user routes)."""
    if key.type == "user":
        raise PermissionDenied("A user key cannot mint another user key: the exchange takes long-lived keys only",
                               code="key_type_not_permitted")


def require_application_key(key: KeyRecord) -> None:
    """Shape A takes only application keys: user keys get 403 key_type_not_permitted, admin keys
    403 application_key_required (the spec's shape A names the application key alone)."""
    refuse_user_key(key)
    if key.type != "application":
        raise PermissionDenied("The exchange of an idp_token takes an application key",
                               code="application_key_required")


class KeyExchange:
    """Both exchange shapes over the key and user repositories."""

    def __init__(self, auth: Authenticator, keys: KeyRepository, users: UserRepository,
                 idp: IdpVerifier | None) -> None:
        self._auth = auth
        self._keys = keys
        self._users = users
        self._idp = idp

    async def for_idp_token(self, app_key: KeyRecord, idp_token: str, ttl_seconds: int | None) -> MintedKey:
        """Shape A: `app_key` is the caller's (already authenticated, application) key."""
        require_application_key(app_key)
        if self._idp is None:
            raise ServiceUnavailable("No identity provider is configured ([idp] in the configuration file)",
                                     code="idp_not_configured")
        claims = self._idp.verify(idp_token)
        user_id = await self._users.resolve_subject(app_key.org_id, claims.subject, claims.email,
                                                    claims.given_name, claims.family_name,
                                                    email_verified=claims.email_verified)
        return await self._mint(app_key, user_id, ttl_seconds)

    async def owning_key(self, api_key: str) -> KeyRecord:
        """Shape B: the long-lived key in the body (401 when invalid, 403 when no user owns it)."""
        owner_key = await self._auth.authenticate(f"Bearer {api_key}")
        refuse_user_key(owner_key)
        if owner_key.user_id is None:
            raise PermissionDenied("This key has no owning user (create it with `inferd keys create --user EMAIL`)",
                                   code="no_owning_user")
        return owner_key

    async def for_owner(self, owner_key: KeyRecord, ttl_seconds: int | None) -> MintedKey:
        """Shape B: a key for the user who owns `owner_key` (from `owning_key`)."""
        assert owner_key.user_id is not None
        return await self._mint(owner_key, owner_key.user_id, ttl_seconds, audited=True)

    async def _mint(self, parent: KeyRecord, user_id: int, ttl_seconds: int | None,
                    audited: bool = False) -> MintedKey:
        access_key_id, secret = mint()
        # Whole seconds, so the stored expiry and the one reported agree exactly.
        expires_at = utcnow().replace(microsecond=0) + timedelta(seconds=clamp_ttl(ttl_seconds))
        audit = None
        if audited:
            audit = AuditEntry(parent.access_key_id, "user_key.mint", str(user_id), {
                "access_key_id": access_key_id, "user_email": await self._users.email_of(user_id),
                "expires_at": iso(expires_at)})
        await self._keys.create(access_key_id=access_key_id, secret_hash=hash_secret(secret), key_type="user",
                                org_id=parent.org_id, user_id=user_id, parent_key_id=parent.id,
                                expires_at=expires_at, audit=audit)
        return MintedKey(access_key_id, secret, expires_at, user_id, parent.org_id)


def build_exchange(auth: Authenticator, keys: KeyRepository, users: UserRepository, idp: IdpConfig | None,
                   config_path: Path | None) -> KeyExchange:
    """The exchange with its identity provider (a relative jwks_file is read beside the configuration file)."""
    base_dir = config_path.expanduser().resolve().parent if config_path else None
    return KeyExchange(auth, keys, users, IdpVerifier(idp, base_dir) if idp is not None else None)

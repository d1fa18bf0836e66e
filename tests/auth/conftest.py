"""Servers whose configuration has an `[idp]` table: an HS256 secret, or a JWKS file of RS256/ES256 keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.conftest import MOCK_CHAT_TOML
from tests.harness import IDP_AUDIENCE as AUDIENCE
from tests.harness import IDP_HS256_SECRET as HS256_SECRET
from tests.harness import IDP_ISSUER as ISSUER
from tests.harness import Backend, Server, Upstream, write_config

__all__ = ["AUDIENCE", "HS256_SECRET", "ISSUER", "JwksKeys"]


class JwksKeys:
    """An RSA and a P-256 key pair, published (public halves) in a JWKS file beside the config."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict[str, Any]:
        rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.rsa.public_key()))
        ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.ec.public_key()))
        return {"keys": [{**rsa_jwk, "kid": "rsa-1", "alg": "RS256", "use": "sig"},
                         {**ec_jwk, "kid": "ec-1", "alg": "ES256", "use": "sig"}]}


@pytest.fixture(scope="session")
def jwks_keys() -> JwksKeys:
    """The identity provider's signing keys."""
    return JwksKeys()


@pytest.fixture(scope="session")
def jwks_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream,
                jwks_keys: JwksKeys) -> Iterator[Server]:
    """A server verifying RS256/ES256 idp tokens against a JWKS file (named relative to the config)."""
    folder = tmp_path_factory.mktemp("idp-jwks")
    (folder / "jwks.json").write_text(json.dumps(jwks_keys.jwks()), encoding="utf-8")
    toml = f'[idp]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\njwks_file = "jwks.json"\n' + MOCK_CHAT_TOML
    config = write_config(Path(folder) / "inferd.toml", toml, upstream)
    srv = Server.start(tmp_path_factory.mktemp("idp-jwks-data"), backend, config)
    try:
        yield srv
    finally:
        srv.stop()

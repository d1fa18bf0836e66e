"""Servers whose configuration has an `[idp]` table: an HS256 secret, or a JWKS file of RS256/ES256 keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.harness import Backend, Server, Upstream, serving, write_config

ISSUER = "https://idp.test"
AUDIENCE = "inferd"
HS256_SECRET = "test-hs256-secret-" + "0123456789abcdef" * 4  # 64+ bytes, long enough for HS512 too

_MODEL = """
[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
"""


@pytest.fixture(scope="session")
def idp_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """A server verifying HS256 idp tokens."""
    toml = f'[idp]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\nhs256_secret = "{HS256_SECRET}"\n' + _MODEL
    with serving(tmp_path_factory.mktemp("idp-hs"), backend, upstream, toml) as srv:
        yield srv


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
    toml = f'[idp]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\njwks_file = "jwks.json"\n' + _MODEL
    config = write_config(Path(folder) / "inferd.toml", toml, upstream)
    srv = Server.start(tmp_path_factory.mktemp("idp-jwks-data"), backend, config)
    try:
        yield srv
    finally:
        srv.stop()

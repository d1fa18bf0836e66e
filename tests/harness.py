"""Process-level helpers for the tests: the fake upstream, `inferd serve`, keys and usage rows."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
from alembic import command
from alembic.config import Config
from sqlalchemy import select
from sqlalchemy.engine import Connection

from inferd.auth.keys import hash_secret, mint
from inferd.cli.keys import create_key
from inferd.metering.journal_file import settle_path
from inferd.metering.journal_pg import settle_database
from inferd.store.db import create_engine, migrate
from inferd.store.keys import KeyRepository
from inferd.store.orgs import OrgRepository
from inferd.store.tables import api_keys, spend, usage_rows
from inferd.store.users import UserRepository

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
INFERD = str(VENV_BIN / "inferd")


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pg_create_database(url: str, name: str) -> str:
    """Create database `name` on the server `url` names; returns the URL of the new database."""
    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(go())
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def pg_drop_database(url: str, name: str) -> None:
    """Drop a database created by `pg_create_database`."""
    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(go())


@dataclass(frozen=True)
class Backend:
    """Where state lives in this run."""

    database_url: str
    redis_url: str | None
    redis_prefix: str

    def env(self) -> dict[str, str]:
        """INFERD_* variables for a server or CLI process."""
        values = {"INFERD_DATABASE_URL": self.database_url, "INFERD_REDIS_PREFIX": self.redis_prefix}
        if self.redis_url:
            values["INFERD_REDIS_URL"] = self.redis_url
        return values


def own_backend(folder: Path, label: str) -> tuple[Backend, str | None]:
    """A fresh database for one server (whose batch worker must not meet another's batches):
    SQLite in `folder`, or a new PostgreSQL database named after `label` when the run is on
    PostgreSQL (its name is returned, for `pg_drop_database`), and a Redis prefix of its own."""
    url = os.environ.get("INFERD_DATABASE_URL")
    redis_url = os.environ.get("INFERD_REDIS_URL") or None
    prefix = f"inferd:test:{uuid.uuid4().hex[:8]}:"
    if url and url.startswith("postgres"):
        name = f"inferd_{label}_{uuid.uuid4().hex[:10]}"
        return Backend(pg_create_database(url, name), redis_url, prefix), name
    return Backend(f"sqlite:///{folder / 'inferd.db'}", redis_url, prefix), None


# The identity provider of the test servers that take idp tokens (tests/conftest.py `idp_server`).
IDP_ISSUER = "https://idp.test"
IDP_AUDIENCE = "inferd"
IDP_HS256_SECRET = "test-hs256-secret-" + "0123456789abcdef" * 4  # 64+ bytes, long enough for HS512 too
IDP_TABLE = f'[idp]\nissuer = "{IDP_ISSUER}"\naudience = "{IDP_AUDIENCE}"\nhs256_secret = "{IDP_HS256_SECRET}"\n'


def idp_token(subject: str, **claims: Any) -> str:
    """An HS256 identity token for `subject` that IDP_TABLE verifies; `claims` add or override."""
    import jwt

    now = int(time.time())
    payload = {"iss": IDP_ISSUER, "aud": IDP_AUDIENCE, "sub": subject, "iat": now, "exp": now + 600, **claims}
    return jwt.encode(payload, IDP_HS256_SECRET, algorithm="HS256")


def on_database(backend: Backend, work: Callable[[Any], Any]) -> Any:
    """Open and migrate the run's database, await `work(engine)` on it, close it; its result."""

    async def go() -> Any:
        engine = create_engine(backend.database_url)
        try:
            await migrate(engine)
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(go())


@contextmanager
def scratch_database(backend: Backend, folder: Path) -> Iterator[str]:
    """The URL of an empty database of the run's kind (a new PostgreSQL database, dropped on exit,
    or a SQLite file in `folder`), for tests that build the schema themselves."""
    if not backend.database_url.startswith("postgresql"):
        yield f"sqlite:///{folder / 'scratch.db'}"
        return
    name = f"inferd_scratch_{uuid.uuid4().hex[:8]}"
    url = pg_create_database(backend.database_url, name)
    try:
        yield url
    finally:
        pg_drop_database(backend.database_url, name)


def upgrade_to(revision: str) -> Callable[[Connection], None]:
    """Run alembic up to `revision` on a connection (for `AsyncConnection.run_sync`): tests of a
    migration fill the tables as they were before it, then migrate the rest of the way."""

    def run(connection: Connection) -> None:
        config = Config()
        config.set_main_option("script_location", "inferd.store:migrations")
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    return run


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """The test process's environment without INFERD_* settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
    env.update(extra)
    return env


@dataclass
class Upstream:
    """The fake upstream engine process."""

    process: subprocess.Popen[str]
    url: str

    @classmethod
    def start(cls, port: int = 0) -> "Upstream":
        """Start tests/fakes/upstream.py on `port` (0: a free one)."""
        process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes" / "upstream.py"), "--port",
                                    str(port)], stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("ready "):
            process.kill()
            raise RuntimeError(f"fake upstream did not start: {line!r}")
        return cls(process, f"http://127.0.0.1:{int(line.split()[1])}")

    def requests(self) -> list[dict[str, Any]]:
        """Bodies the fake received, oldest first."""
        return list(httpx.get(self.url + "/_requests").json())

    def last_chat_body(self) -> dict[str, Any]:
        """The body of the newest chat request the fake received."""
        chats = [r for r in self.requests() if r["path"] == "/v1/chat/completions"]
        return dict(chats[-1]["body"])

    def aborts(self) -> list[dict[str, Any]]:
        """Streams whose client went away."""
        return list(httpx.get(self.url + "/_aborts").json())

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        """Stop the process (SIGKILL: it gets no chance to close its connections)."""
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if tools %}<|im_start|>tools\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write_chatml_tokenizer(folder: Path) -> Path:
    """A small word-level tokenizer with a ChatML template, built here so tests know its counts:
    one token per whitespace-separated word or punctuation run, one per special token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}), encoding="utf-8")
    return folder


def write_config(path: Path, template: str, upstream: Upstream) -> Path:
    """Write a TOML catalogue naming the fake upstream (and a local tokenizer beside it)."""
    tokenizer = write_chatml_tokenizer(path.parent / "chatml-tokenizer")
    path.write_text(template.format(upstream=upstream.url, dead_port=free_port(), tokenizer=tokenizer),
                    encoding="utf-8")
    return path


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@dataclass
class Server:
    """A running `inferd serve`."""

    process: subprocess.Popen[bytes]
    base_url: str
    backend: Backend
    data_dir: Path
    config: Path | None
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, data_dir: Path, backend: Backend, config: Path | None, extra_env: dict[str, str] | None = None,
              args: tuple[str, ...] = (), batch_worker: bool = False) -> "Server":
        """Start a server (with the built-in catalogue when `config` is None) and wait until it answers;
        the batch worker runs inside it only when `batch_worker` is true."""
        port = free_port()
        env = clean_env({**backend.env(), **(extra_env or {})})
        log_path = data_dir / f"server-{port}.log"
        config_args = ("--config", str(config)) if config else ()
        with open(log_path, "wb") as log:
            process = subprocess.Popen([INFERD, "serve", "--host", "127.0.0.1", "--port", str(port), *config_args,
                                        "--data-dir", str(data_dir),
                                        *(() if batch_worker else ("--no-batch-worker",)), *args],
                                       stdout=log, stderr=subprocess.STDOUT, env=env)
        server = cls(process, f"http://127.0.0.1:{port}", backend, data_dir, config, log_path, env)
        server.wait_ready()
        return server

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Poll until the server answers HTTP."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}: {self.log()}")
            try:
                httpx.get(self.base_url + "/openapi.json", timeout=1.0)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start: {self.log()}")

    def log(self) -> str:
        """What the server printed."""
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the process."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @property
    def v1(self) -> str:
        """The API base URL."""
        return self.base_url + "/v1"

    # --- state, through the project's own storage code on the same database ---------------

    async def _with_db(self, work: Any) -> Any:
        engine = create_engine(self.backend.database_url)
        try:
            await migrate(engine)
            return await work(engine)
        finally:
            await engine.dispose()

    def create_key(self, org: str | None = None, key_type: str = "application", budget_usd: float | None = None,
                   rpm: int | None = None, user_email: str | None = None) -> str:
        """Mint a key (in a fresh org unless named) and return the full bearer token."""
        org = org or f"org-{uuid.uuid4().hex[:8]}"

        async def work(engine: Any) -> tuple[str, str]:
            return await create_key(engine, org, key_type, None, user_email, budget_usd, rpm)

        access_key_id, secret = _run(self._with_db(work))
        return f"{access_key_id}:{secret}"

    def create_org(self, slug: str, models: tuple[str, ...] | None) -> None:
        """Create an org with an allow-list."""

        async def work(engine: Any) -> None:
            await OrgRepository(engine).create(slug, models)

        _run(self._with_db(work))

    def create_user_key(self, parent_full_key: str, expires_at: datetime | None = None,
                        key_type: str = "user", email: str | None = None) -> str:
        """A key minted under `parent_full_key`'s org (as the exchange will), for tests of key types.
        A user key belongs to the org's user with `email` (a fresh user when not given)."""
        parent_id = parent_full_key.split(":")[0]

        async def work(engine: Any) -> str:
            async with engine.connect() as conn:
                parent = (await conn.execute(select(api_keys).where(api_keys.c.access_key_id == parent_id))
                          ).mappings().one()
            user_id = None
            if key_type == "user":
                user_id = await UserRepository(engine).get_or_create_by_email(
                    parent["org_id"], email or f"user-{uuid.uuid4().hex[:10]}@example.test")
            access_key_id, secret = mint()
            await KeyRepository(engine).create(
                access_key_id=access_key_id, secret_hash=hash_secret(secret), key_type=key_type,
                org_id=parent["org_id"], parent_key_id=parent["id"] if key_type == "user" else None,
                expires_at=expires_at, user_id=user_id)
            return f"{access_key_id}:{secret}"

        return str(_run(self._with_db(work)))

    def revoke(self, full_key: str) -> None:
        """Revoke a key the way `inferd keys revoke` does."""

        async def work(engine: Any) -> None:
            assert await KeyRepository(engine).revoke(full_key.split(":")[0])

        _run(self._with_db(work))

    async def _settled(self, engine: Any) -> None:
        """Fold the servers' usage journals first, as every reader of usage in inferd does (the
        rows of replies that have left may still be in a journal)."""
        if engine.dialect.name == "sqlite":
            await asyncio.to_thread(settle_path, engine.url.database)
        elif engine.dialect.name == "postgresql":
            await settle_database(engine.url, self.data_dir)

    def usage_rows(self, full_key: str) -> list[dict[str, Any]]:
        """Usage rows charged to a key, oldest first."""
        key_id = full_key.split(":")[0]

        async def work(engine: Any) -> list[dict[str, Any]]:
            await self._settled(engine)
            async with engine.connect() as conn:
                rows = await conn.execute(select(usage_rows).where(usage_rows.c.key_id == key_id)
                                          .order_by(usage_rows.c.id))
                return [dict(r) for r in rows.mappings()]

        return list(_run(self._with_db(work)))

    def spend(self, full_key: str) -> float:
        """The key's spend in the spend table (all days)."""
        key_id = full_key.split(":")[0]

        async def work(engine: Any) -> float:
            await self._settled(engine)
            async with engine.connect() as conn:
                values = (await conn.execute(select(spend.c.spend_usd).where(
                    spend.c.scope == "key", spend.c.owner == key_id))).scalars().all()
                return float(sum(values))

        return float(_run(self._with_db(work)))

    def key_row(self, full_key: str) -> dict[str, Any]:
        """The stored row of a key."""
        key_id = full_key.split(":")[0]

        async def work(engine: Any) -> dict[str, Any]:
            async with engine.connect() as conn:
                return dict((await conn.execute(select(api_keys).where(api_keys.c.access_key_id == key_id))
                             ).mappings().one())

        return dict(_run(self._with_db(work)))



@contextmanager
def serving(folder: Path, backend: Backend, upstream: Upstream, template: str, **start: Any) -> Iterator[Server]:
    """`inferd serve` on the catalogue `template` (as `write_config` fills it in), with `folder` as its
    data dir, stopped on exit; `start` goes to `Server.start`."""
    config = write_config(folder / "inferd.toml", template, upstream)
    server = Server.start(folder, backend, config, **start)
    try:
        yield server
    finally:
        server.stop()


def auth(full_key: str) -> dict[str, str]:
    """The Authorization header for a key."""
    return {"Authorization": f"Bearer {full_key}"}

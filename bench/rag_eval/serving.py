"""`inferd serve` with the built-in catalogue for the retrieval eval, importing a chosen source tree.

Unlike bench/_builtin_server.py this one can run another checkout's code (`src`, put first on
PYTHONPATH, which wins over the editable install's .pth entry) and says which `inferd` package
the server really imported, so a "before" run cannot silently measure the working tree.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

# The CLI's entry point run with -c rather than the `inferd` console script, so that the first
# line of stderr names the package file Python actually imported.
_LAUNCH = ("import sys, inferd; print('inferd imported from', inferd.__file__, file=sys.stderr, flush=True); "
           "from inferd.cli import main; sys.argv[0] = 'inferd'; sys.exit(main())")
STARTUP_S = 180.0


@dataclass(frozen=True)
class Served:
    """A running server: its /v1 base URL, a user key for one end user, and the package it imported."""

    base: str
    user_key: str
    imported_from: str


def _cli(env: dict[str, str], *args: str, log: Path | None = None) -> subprocess.Popen[str]:
    """Start `inferd ARGS` with this interpreter: its output to `log` when given (a server, whose pipes
    nobody reads, must not block on a full one), else captured."""
    if log is None:
        return subprocess.Popen([sys.executable, "-c", _LAUNCH, *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-c", _LAUNCH, *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, text=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(base: str, server: subprocess.Popen[str], log: Path) -> None:
    """Return once the server answers HTTP; raise with its log when it exits or never answers."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"inferd serve exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(base.removesuffix("/v1") + "/openapi.json", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise RuntimeError(f"inferd serve did not answer within {STARTUP_S:.0f} s:\n{log.read_text()[-3000:]}")


def _user_key(base: str, application_key: str) -> str:
    """A user key for the application key's owner (POST /v1/auth/exchange)."""
    response = httpx.post(base + "/auth/exchange", json={"api_key": application_key}, timeout=30)
    response.raise_for_status()
    return str(response.json()["user_key"])


@contextmanager
def eval_server(src: Path, user_email: str = "rag-eval@example.test") -> Iterator[Served]:
    """A fresh data dir and `inferd serve --no-batch-worker` importing `src`; stopped and removed after."""
    with tempfile.TemporaryDirectory(prefix="rag-eval-") as data:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_") or k == "INFERD_MODEL_DIR"}
        env.update(INFERD_DATA_DIR=data, PYTHONPATH=os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")])))
        created = _cli(env, "keys", "create", "--org", "rag-eval", "--type", "application", "--user", user_email,
                       "--json")
        out, err = created.communicate(timeout=120)
        if created.returncode != 0:
            raise RuntimeError(f"inferd keys create failed:\n{err}")
        application_key = json.loads(out)["full_key"]
        log = Path(data) / "server.log"
        port = _free_port()
        server = _cli(env, "serve", "--port", str(port), "--no-batch-worker", log=log)
        base = f"http://127.0.0.1:{port}/v1"
        try:
            _wait_ready(base, server, log)
            imported = log.read_text().splitlines()[0].removeprefix("inferd imported from ")
            yield Served(base, _user_key(base, application_key), imported)
        finally:
            server.terminate()
            server.wait(30)

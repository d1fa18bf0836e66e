"""`inferd serve` with the built-in catalogue on a free port and a fresh data dir, for the
benchmarks that measure built-in models through the server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx


@contextmanager
def builtin_server(user_email: str | None = None) -> Iterator[tuple[str, str]]:
    """(base URL of /v1, an application key, owned by the user `user_email` when given); the server
    is stopped and the data dir removed after."""
    venv_bin = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as data:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_") or k == "INFERD_MODEL_DIR"}
        env["INFERD_DATA_DIR"] = data
        created = subprocess.run([str(venv_bin / "inferd"), "keys", "create", "--org", "bench", "--type",
                                  "application", "--json", *(("--user", user_email) if user_email else ())],
                                 env=env, capture_output=True, text=True, check=True)
        key = json.loads(created.stdout)["full_key"]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = subprocess.Popen([str(venv_bin / "inferd"), "serve", "--port", str(port), "--no-batch-worker"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(300):
                try:
                    httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            yield f"http://127.0.0.1:{port}/v1", key
        finally:
            server.terminate()
            server.wait(30)

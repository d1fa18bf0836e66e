"""bench/overhead.py's targets: the child processes it starts and what it sends each of them."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
MODES = ("blocking", "stream")
PROMPT = [{"role": "user", "content": "Say hello to the benchmark"}]
CHAT_STREAM_END = "data: [DONE]"
MESSAGES_STREAM_END = 'data: {"type":"message_stop"}'  # Anthropic's last event (`messages` target)
RESPONSES_STREAM_END = '"type":"response.completed"}'  # the Responses API's last event ends so (`responses`)
INFERD_CONFIG = """\
[[models]]
id = "mock-chat"
type = "chat"
engine = "openai"
base_url = "http://127.0.0.1:{upstream_port}/v1"
upstream_model = "mock"
context_length = 4096
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}
"""


class BenchError(RuntimeError):
    """A target could not be started or does not answer correctly."""


# ---------------------------------------------------------------------------------------------
# Child processes


class Children:
    """Every process this benchmark starts; each in its own session so it can be ended as a group."""

    def __init__(self, log_dir: Path, pin: bool) -> None:
        self.log_dir = log_dir
        self.pin = pin
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    def pinned(self, core: int, argv: list[str]) -> list[str]:
        """argv prefixed with taskset when pinning."""
        return ["taskset", "-c", str(core), *argv] if self.pin else argv

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a long-lived child whose stdout and stderr go to a log file."""
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=ROOT, env=env, start_new_session=True)
        log.close()
        self.processes.append((name, process))
        return process

    def log_tail(self, name: str, lines: int = 25) -> str:
        """The last lines a child wrote."""
        try:
            text = (self.log_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready_line(self, name: str, process: subprocess.Popen[bytes], timeout: float = 30) -> int:
        """The port from the `ready <port>` line a child prints when listening."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(r"^ready (\d+)", (self.log_dir / f"{name}.log").read_text(errors="replace"), re.M)
            if match:
                return int(match.group(1))
            if process.poll() is not None:
                break
            time.sleep(0.05)
        raise BenchError(f"{name} did not become ready:\n{self.log_tail(name)}")

    def stop(self, process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
        """End a child and everything in its process group: SIGTERM, then SIGKILL."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
            if process.poll() is not None:
                break
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        # Leftovers of the group (a server's workers) once the leader is gone.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop_all(self) -> None:
        """End every child, newest first."""
        while self.processes:
            _, process = self.processes.pop()
            self.stop(process)

    def forget(self, process: subprocess.Popen[bytes]) -> None:
        """Drop a child that has exited on its own."""
        self.processes = [(name, other) for name, other in self.processes if other is not process]


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy


def post(url: str, body: dict[str, Any], headers: dict[str, str], timeout: float = 30) -> tuple[int, bytes]:
    """One POST with the standard library: (status, body)."""
    request = urllib.request.Request(url, data=orjson.dumps(body), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


# ---------------------------------------------------------------------------------------------
# Targets


class Target:
    """One thing to put load on: where to send it, what to send, and whose CPU to count. `messages`:
    the same prompt as Anthropic's Messages API (POST /v1/messages) instead of a chat completion;
    `responses`: as OpenAI's Responses API (POST /v1/responses, stored as by default)."""

    def __init__(self, name: str, base_url: str, model: str, pid: int | None, headers: dict[str, str] | None = None,
                 usage_option: bool = True, messages: bool = False, responses: bool = False) -> None:
        self.name = name
        self.url = base_url.rstrip("/") + ("/messages" if messages else "/responses" if responses
                                           else "/chat/completions")
        self.model = model
        self.pid = pid
        self.headers = headers or {}
        self.usage_option = usage_option
        self.messages = messages
        self.responses = responses
        self.stream_end = MESSAGES_STREAM_END if messages else RESPONSES_STREAM_END if responses else CHAT_STREAM_END

    def body(self, mode: str) -> dict[str, Any]:
        """The request body for a mode."""
        if self.messages:  # max_tokens is required there; the fake's 16-word reply stays whole
            return {"model": self.model, "max_tokens": 64, "messages": PROMPT, "metadata": {"user_id": "bench"},
                    **({"stream": True} if mode == "stream" else {})}
        if self.responses:
            return {"model": self.model, "input": PROMPT, "metadata": {"team": "bench"},
                    **({"stream": True} if mode == "stream" else {})}
        body: dict[str, Any] = {"model": self.model, "messages": PROMPT, "metadata": {"team": "bench"}}
        if mode == "stream":
            body["stream"] = True
            if self.usage_option:  # inferd asks the upstream for usage itself
                body["stream_options"] = {"include_usage": True}
        return body

    def preflight(self) -> None:
        """One request per mode, so a broken target fails loudly before any measuring."""
        for mode in MODES:
            status, data = post(self.url, self.body(mode), self.headers)
            if status != 200 or (mode == "stream" and not data.rstrip().endswith(self.stream_end.encode())):
                raise BenchError(f"{self.name} {mode} preflight answered {status}: {data[:400]!r}")


def start_upstream(children: Children, core: int, name: str = "upstream", port: int = 0) -> tuple[int, int]:
    """A fake upstream on the client core: (pid, port). Port 0: any free one."""
    process = children.start(name, children.pinned(core, [sys.executable, "tests/fakes/upstream.py",
                                                          "--port", str(port)]))
    return process.pid, children.wait_ready_line(name, process)


def start_passthrough(children: Children, core: int, upstream_port: int) -> Target:
    """bench/passthrough.py on the gateway core."""
    process = children.start("passthrough", children.pinned(core, [
        sys.executable, str(BENCH / "passthrough.py"), "--port", "0",
        "--upstream", f"http://127.0.0.1:{upstream_port}/v1"]))
    port = children.wait_ready_line("passthrough", process)
    return Target("passthrough", f"http://127.0.0.1:{port}/v1", "mock", process.pid)


def _create_key(inferd: str, env: dict[str, str]) -> str:
    """Mint an application key with a budget and a limit that never trips; its full key."""
    base = [inferd, "keys", "create", "--org", "bench", "--type", "application", "--name", "bench", "--json"]
    attempts = [[*base, "--rpm", "100000000", "--budget-usd", "1000000"], [*base, "--budget-usd", "1000000"]]
    errors = []
    for argv in attempts:
        done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode == 0:
            for line in reversed(done.stdout.decode(errors="replace").strip().splitlines()):
                if line.lstrip().startswith("{"):
                    return str(orjson.loads(line)["full_key"])
            try:
                return str(orjson.loads(done.stdout)["full_key"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                errors.append(f"{' '.join(argv[1:])}: no full_key in {done.stdout[-400:]!r}")
        else:
            errors.append(f"{' '.join(argv[1:])} -> exit {done.returncode}: "
                          f"{(done.stderr or done.stdout).decode(errors='replace')[-600:]}")
    raise BenchError("inferd keys create failed:\n" + "\n".join(errors))


def start_inferd(children: Children, core: int, upstream_port: int, work_dir: Path, inferd: str,
                 extra_env: dict[str, str], startup_timeout: float, config_text: str | None = None) -> Target:
    """inferd serve on the gateway core, with a config naming the fake upstream and a fresh data dir.

    `config_text` replaces the catalogue (INFERD_CONFIG, model `mock-chat`); the target returned
    still names `mock-chat`: make others from its url and headers.
    """
    if not (os.path.isfile(inferd) and os.access(inferd, os.X_OK)):
        raise BenchError(f"{inferd} does not exist (is the package installed in .venv?)")
    config = work_dir / "inferd.toml"
    config.write_text(INFERD_CONFIG.format(upstream_port=upstream_port) if config_text is None else config_text)
    data_dir = work_dir / "inferd-data"
    data_dir.mkdir()
    env = {name: value for name, value in os.environ.items() if not name.startswith("INFERD_")}
    env.update({"INFERD_CONFIG": str(config), "INFERD_DATA_DIR": str(data_dir), **extra_env})
    key: str | None = None
    key_error: BenchError | None = None
    try:  # before serving, so the server never has to notice a key minted behind its back
        key = _create_key(inferd, env)
    except BenchError as error:
        key_error = error
    port = free_port()
    process = children.start("inferd", children.pinned(core, [
        inferd, "serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(config),
        "--data-dir", str(data_dir), "--no-batch-worker"]), env=env)
    deadline = time.monotonic() + startup_timeout
    while True:
        try:
            with _OPENER.open(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                break
        except urllib.error.HTTPError:
            break  # any HTTP status means it is serving
        except (urllib.error.URLError, OSError):
            pass
        if process.poll() is not None:
            raise BenchError(f"inferd serve exited with {process.returncode}:\n{children.log_tail('inferd')}")
        if time.monotonic() > deadline:
            raise BenchError(f"inferd serve did not answer within {startup_timeout:.0f}s:\n"
                             f"{children.log_tail('inferd')}")
        time.sleep(0.2)
    if key is None:  # perhaps the database only exists once the server has migrated it
        try:
            key = _create_key(inferd, env)
        except BenchError as error:
            raise BenchError(f"{key_error}\n(and again after serve started) {error}") from None
    return Target("inferd", f"http://127.0.0.1:{port}/v1", "mock-chat", process.pid,
                  {"Authorization": f"Bearer {key}"}, usage_option=False)

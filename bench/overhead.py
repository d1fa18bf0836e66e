"""What inferd costs on top of the floor any Python gateway pays.

The same load three ways: straight at the fake upstream (`direct`), through a bare aiohttp
passthrough proxy (`passthrough`, bench/passthrough.py, the floor), and through inferd with auth,
limits and metering on (`inferd`); blocking and streaming; at concurrency 1 and 64. For each cell
it prints req/s, p50/p99 latency and the gateway's CPU microseconds per request, then the ratios
against the targets: inferd's CPU per request at most 1.5x the passthrough's, and at most +1 ms
on the p50 at concurrency 1.

Method: the gateway under test runs pinned to one core (`taskset -c 0`), the fake upstream and the
load generator (bench/_loadgen.py) on the other (`taskset -c 1`). Gateway CPU per request is the
change in utime+stime of the gateway's process tree (/proc/<pid>/stat) over the measured phase,
divided by the requests that completed in it. Each run warms up first; cells are interleaved
(direct, passthrough, inferd back to back for each mode and concurrency, `--repeat` rounds) and
each figure is the median over the rounds, so a noisy minute on the host hits all three alike.

Run: `.venv/bin/python bench/overhead.py` (about 3 minutes), `--quick` (under a minute),
`--json results.json` to keep the numbers. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
TARGETS = ("direct", "passthrough", "inferd")
MODES = ("blocking", "stream")
CPU_RATIO_TARGET = 1.5
P50_DELTA_TARGET_MS = 1.0
NOISE_WARNING = 0.10  # of a core used by anything else on the two cores during a measured phase
PROMPT = [{"role": "user", "content": "Say hello to the benchmark"}]
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
    """One thing to put load on: where to send it, what to send, and whose CPU to count."""

    def __init__(self, name: str, base_url: str, model: str, pid: int | None, headers: dict[str, str] | None = None,
                 usage_option: bool = True) -> None:
        self.name = name
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.pid = pid
        self.headers = headers or {}
        self.usage_option = usage_option

    def body(self, mode: str) -> dict[str, Any]:
        """The request body for a mode."""
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
            if status != 200 or (mode == "stream" and not data.rstrip().endswith(b"data: [DONE]")):
                raise BenchError(f"{self.name} {mode} preflight answered {status}: {data[:400]!r}")


def start_upstream(children: Children, core: int) -> tuple[int, int]:
    """The fake upstream on the client core: (pid, port)."""
    process = children.start("upstream", children.pinned(core, [sys.executable, "tests/fakes/upstream.py",
                                                                "--port", "0"]))
    return process.pid, children.wait_ready_line("upstream", process)


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
                 extra_env: dict[str, str], startup_timeout: float) -> Target:
    """inferd serve on the gateway core, with a config naming the fake upstream and a fresh data dir."""
    if not (os.path.isfile(inferd) and os.access(inferd, os.X_OK)):
        raise BenchError(f"{inferd} does not exist (is the package installed in .venv?)")
    config = work_dir / "inferd.toml"
    config.write_text(INFERD_CONFIG.format(upstream_port=upstream_port))
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


# ---------------------------------------------------------------------------------------------
# Measuring


def run_cell(children: Children, args: argparse.Namespace, target: Target, mode: str, concurrency: int,
             upstream_pid: int) -> dict[str, Any]:
    """One load-generator run against one target; its JSON result."""
    argv = [sys.executable, str(BENCH / "_loadgen.py"), "--url", target.url,
            "--body", orjson.dumps(target.body(mode)).decode(), "--concurrency", str(concurrency),
            "--warmup", str(args.warmup), "--duration", str(args.duration), "--requests", str(args.requests),
            "--client-pid", str(upstream_pid), "--client", args.client,
            "--cores", f"{args.gateway_core},{args.client_core}" if args.pin else ""]
    argv += [f"--header={name}: {value}" for name, value in target.headers.items()]
    if mode == "stream":
        argv.append("--stream")
    if target.pid is not None:
        argv += ["--gateway-pid", str(target.pid)]
    process = subprocess.Popen(children.pinned(args.client_core, argv), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)
    children.processes.append(("loadgen", process))
    # Allow generously for start-up and draining; a --requests run assumes at least 50 req/s.
    timeout = args.warmup + 60 + (args.requests / 50 if args.requests else args.duration)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"load generator against {target.name} did not finish within {timeout:.0f}s") from None
    finally:
        children.stop(process)
        children.forget(process)
    if process.returncode != 0:
        raise BenchError(f"load generator failed ({process.returncode}):\n{stderr.decode(errors='replace')[-2000:]}")
    return orjson.loads(stdout.splitlines()[-1])


SUMMARY_FIELDS = ("rps", "p50_ms", "p90_ms", "p99_ms", "gateway_cpu_us_per_req", "gateway_core_busy",
                  "client_core_busy", "loadgen_cpu_us_per_req", "upstream_cpu_us_per_req", "steal", "foreign")


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each figure over the rounds; failures summed."""
    summary: dict[str, Any] = {}
    for name in SUMMARY_FIELDS:
        values = [run[name] for run in runs if run.get(name) is not None]
        summary[name] = statistics.median(values) if values else None
    summary["completed"] = sum(run["completed"] for run in runs)
    summary["failed"] = sum(run["failed"] + run["warmup_failed"] for run in runs)
    summary["failure_samples"] = [sample for run in runs for sample in run["failure_samples"]][:5]
    summary["rounds"] = len(runs)
    return summary


# ---------------------------------------------------------------------------------------------
# Reporting


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def print_table(cells: list[dict[str, Any]]) -> None:
    """One line per (target, mode, concurrency)."""
    header = (f"{'target':<12}{'mode':<10}{'conc':>5}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'gw CPU us/req':>15}{'gw core':>9}{'client core':>13}{'other':>7}{'failed':>8}")
    print(header)
    print("-" * len(header))
    for cell in cells:
        s = cell["summary"]
        busy = (lambda v: _fmt(None if v is None else min(v, 1.0) * 100, ".0f", "%"))  # ticks round past 100
        other = None if s["foreign"] is None else s["foreign"] + (s["steal"] or 0.0)
        print(f"{cell['target']:<12}{cell['mode']:<10}{cell['concurrency']:>5}{_fmt(s['rps'], '.0f'):>10}"
              f"{_fmt(s['p50_ms'], '.3f'):>9}{_fmt(s['p99_ms'], '.3f'):>9}"
              f"{_fmt(s['gateway_cpu_us_per_req'], '.0f'):>15}{busy(s['gateway_core_busy']):>9}"
              f"{busy(s['client_core_busy']):>13}{busy(other):>7}{s['failed']:>8}")


def compare(cells: list[dict[str, Any]], concurrencies: list[int], modes: list[str]) -> dict[str, Any]:
    """inferd against the passthrough (and direct): ratios, deltas and the verdict on the targets."""
    by_key = {(cell["target"], cell["mode"], cell["concurrency"]): cell["summary"] for cell in cells}
    rows = []
    for mode in modes:
        for concurrency in concurrencies:
            inferd = by_key.get(("inferd", mode, concurrency))
            passthrough = by_key.get(("passthrough", mode, concurrency))
            direct = by_key.get(("direct", mode, concurrency))
            row: dict[str, Any] = {"mode": mode, "concurrency": concurrency}
            if inferd and passthrough and inferd["gateway_cpu_us_per_req"] and passthrough["gateway_cpu_us_per_req"]:
                row["cpu_ratio"] = inferd["gateway_cpu_us_per_req"] / passthrough["gateway_cpu_us_per_req"]
                row["cpu_ok"] = row["cpu_ratio"] <= CPU_RATIO_TARGET
            if inferd and passthrough and inferd["p50_ms"] is not None and passthrough["p50_ms"] is not None:
                row["p50_delta_vs_passthrough_ms"] = inferd["p50_ms"] - passthrough["p50_ms"]
                if concurrency == 1:
                    row["p50_ok"] = row["p50_delta_vs_passthrough_ms"] <= P50_DELTA_TARGET_MS
            if inferd and direct and inferd["p50_ms"] is not None and direct["p50_ms"] is not None:
                row["p50_delta_vs_direct_ms"] = inferd["p50_ms"] - direct["p50_ms"]
            if passthrough and direct and passthrough["p50_ms"] is not None and direct["p50_ms"] is not None:
                row["passthrough_p50_delta_vs_direct_ms"] = passthrough["p50_ms"] - direct["p50_ms"]
            row["failures"] = bool((inferd and inferd["failed"]) or (passthrough and passthrough["failed"]))
            rows.append(row)

    def verdict(flag: str) -> bool | None:
        flags = [row[flag] for row in rows if flag in row]
        if not flags:
            return None
        return all(flags) and not any(row["failures"] for row in rows)

    return {"rows": rows, "cpu_target_met": verdict("cpu_ok"), "p50_target_met": verdict("p50_ok")}


def print_comparison(comparison: dict[str, Any]) -> None:
    """The ratios and deltas, and whether the targets are met."""
    print()
    print(f"{'mode':<10}{'conc':>5}{'CPU inferd/passthrough':>24}{'p50 +ms vs passthrough':>24}"
          f"{'p50 +ms vs direct':>19}{'passthrough +ms vs direct':>27}")
    for row in comparison["rows"]:
        ratio = _fmt(row.get("cpu_ratio"), ".2f", "x")
        if "cpu_ok" in row:
            ratio += " ok" if row["cpu_ok"] else " OVER"
        delta = _fmt(row.get("p50_delta_vs_passthrough_ms"), "+.3f")
        if "p50_ok" in row:
            delta += " ok" if row["p50_ok"] else " OVER"
        print(f"{row['mode']:<10}{row['concurrency']:>5}{ratio:>24}{delta:>24}"
              f"{_fmt(row.get('p50_delta_vs_direct_ms'), '+.3f'):>19}"
              f"{_fmt(row.get('passthrough_p50_delta_vs_direct_ms'), '+.3f'):>27}")
    print()
    words = {True: "MET", False: "NOT MET", None: "not measured"}
    print(f"target: inferd CPU per request <= {CPU_RATIO_TARGET}x the passthrough's (every cell): "
          f"{words[comparison['cpu_target_met']]}")
    print(f"target: inferd p50 <= passthrough p50 + {P50_DELTA_TARGET_MS:g} ms at concurrency 1: "
          f"{words[comparison['p50_target_met']]}")


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="one round, 0.5 s warm-up, 2 s measured per cell (under a minute)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds of warm-up per run (default 1)")
    parser.add_argument("--duration", type=float, default=None, help="seconds measured per run (default 3)")
    parser.add_argument("--requests", type=int, default=0,
                        help="measure this many completed requests per run instead of a duration")
    parser.add_argument("--repeat", type=int, default=None,
                        help="rounds per cell; figures are medians over rounds (default 3)")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma list of direct,passthrough,inferd")
    parser.add_argument("--modes", default=",".join(MODES), help="comma list of blocking,stream")
    parser.add_argument("--concurrency", default="1,64", help="comma list of concurrencies")
    parser.add_argument("--gateway-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1, help="core for the fake upstream and load generator")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not use taskset")
    parser.add_argument("--client", choices=("raw", "aiohttp"), default="raw",
                        help="load generator's HTTP client (raw: httptools on asyncio protocols, the cheapest)")
    parser.add_argument("--inferd-bin", default=str(ROOT / ".venv" / "bin" / "inferd"))
    parser.add_argument("--inferd-env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment for inferd (e.g. INFERD_REDIS_URL=redis://127.0.0.1:6379/0)")
    parser.add_argument("--inferd-startup-timeout", type=float, default=90.0)
    parser.add_argument("--json", metavar="FILE", help="also write every run and the summary to FILE")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary directory with child logs")
    args = parser.parse_args(argv)
    quick = args.quick
    args.warmup = args.warmup if args.warmup is not None else (0.5 if quick else 1.0)
    args.duration = args.duration if args.duration is not None else (2.0 if quick else 3.0)
    args.repeat = args.repeat if args.repeat is not None else (1 if quick else 3)
    args.targets = [name for name in args.targets.split(",") if name]
    args.modes = [name for name in args.modes.split(",") if name]
    args.concurrency = [int(value) for value in args.concurrency.split(",") if value]
    for name in args.targets:
        if name not in TARGETS:
            parser.error(f"unknown target {name!r}")
    for name in args.modes:
        if name not in MODES:
            parser.error(f"unknown mode {name!r}")
    if args.pin and (os.cpu_count() or 1) < 2:
        print("warning: fewer than two cores; running unpinned", file=sys.stderr)
        args.pin = False
    return args


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    work_dir = Path(tempfile.mkdtemp(prefix="inferd-bench-"))
    children = Children(work_dir, args.pin)
    problems: dict[str, str] = {}
    cells: list[dict[str, Any]] = []
    try:
        upstream_pid, upstream_port = start_upstream(children, args.client_core)
        targets: list[Target] = []
        for name in args.targets:
            try:
                if name == "direct":
                    target = Target("direct", f"http://127.0.0.1:{upstream_port}/v1", "mock", None)
                elif name == "passthrough":
                    target = start_passthrough(children, args.gateway_core, upstream_port)
                else:
                    extra_env = dict(item.split("=", 1) for item in args.inferd_env)
                    target = start_inferd(children, args.gateway_core, upstream_port, work_dir, args.inferd_bin,
                                          extra_env, args.inferd_startup_timeout)
                target.preflight()
                targets.append(target)
            except BenchError as error:
                problems[name] = str(error)
                print(f"skipping {name}: {error}", file=sys.stderr)
        plan = [(mode, concurrency) for mode in args.modes for concurrency in args.concurrency]
        total = len(plan) * args.repeat * len(targets)
        step = 0
        for mode, concurrency in plan:
            runs: dict[str, list[dict[str, Any]]] = {target.name: [] for target in targets}
            for round_number in range(args.repeat):
                for target in targets:
                    step += 1
                    result = run_cell(children, args, target, mode, concurrency, upstream_pid)
                    runs[target.name].append(result)
                    print(f"[{step:>3}/{total}] {target.name:<12}{mode:<9} c={concurrency:<3} "
                          f"round {round_number + 1}: {result['rps']:8.0f} req/s  p50 "
                          f"{_fmt(result['p50_ms'], '.3f')} ms  gw CPU "
                          f"{_fmt(result['gateway_cpu_us_per_req'], '.0f')} us/req  other "
                          f"{_fmt(None if result['foreign'] is None else (result['foreign'] + result['steal']) * 100, '.0f', '%')}"
                          f"{'  FAILED ' + str(result['failed'] + result['warmup_failed']) if result['failed'] + result['warmup_failed'] else ''}",
                          file=sys.stderr, flush=True)
            for target in targets:
                cells.append({"target": target.name, "mode": mode, "concurrency": concurrency,
                              "summary": summarise(runs[target.name]), "runs": runs[target.name]})
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BenchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        children.stop_all()
        if args.keep_logs:
            print(f"logs kept in {work_dir}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)

    order = {name: index for index, name in enumerate(TARGETS)}
    cells.sort(key=lambda cell: (args.modes.index(cell["mode"]), cell["concurrency"], order[cell["target"]]))
    print()
    print(f"overhead: {args.repeat} round(s) x {args.warmup:g} s warm-up + "
          f"{f'{args.requests} requests' if args.requests else f'{args.duration:g} s'} per cell; "
          f"gateway on core {args.gateway_core}, upstream and load on core {args.client_core}"
          f"{'' if args.pin else ' (unpinned)'}; figures are medians over rounds")
    print("gw core / client core: CPU used by the gateway / by the fake upstream and load generator; other: by\n"
          "anything else on those two cores (other processes, hypervisor steal). All in % of one core.")
    print_table(cells)
    comparison = compare(cells, args.concurrency, args.modes)
    print_comparison(comparison)
    failures = [(cell, cell["summary"]) for cell in cells if cell["summary"]["failed"]]
    for cell, summary in failures:
        print(f"\nFAILURES {cell['target']} {cell['mode']} c={cell['concurrency']}: {summary['failed']}",
              file=sys.stderr)
        for sample in summary["failure_samples"]:
            print(f"  {sample}", file=sys.stderr)
    noisy = [cell for cell in cells if cell["summary"]["foreign"] is not None
             and cell["summary"]["foreign"] + (cell["summary"]["steal"] or 0.0) > NOISE_WARNING]
    if noisy:
        print(f"\nwarning: in {len(noisy)} of {len(cells)} cells something else used more than "
              f"{NOISE_WARNING:.0%} of a core on the benchmark's cores ('other'); those figures are unreliable, "
              f"run again on a quiet machine", file=sys.stderr)
    for name, problem in problems.items():
        print(f"\n{name} not measured: {problem}", file=sys.stderr)
    if args.json:
        report = {
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "kernel": os.uname().release},
            "settings": {"warmup_s": args.warmup, "duration_s": args.duration, "requests": args.requests,
                         "repeat": args.repeat, "pinned": args.pin, "gateway_core": args.gateway_core,
                         "client_core": args.client_core, "client": args.client},
            "targets": {"cpu_ratio_max": CPU_RATIO_TARGET, "p50_delta_max_ms": P50_DELTA_TARGET_MS},
            "cells": cells, "comparison": comparison, "not_measured": problems,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        Path(args.json).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        print(f"\nwrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

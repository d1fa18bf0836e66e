"""A model pool losing a deployment under load (issue 13's acceptance).

Four fake upstreams (tests/fakes/upstream.py, each its own process and port) and one `inferd serve`
whose catalogue holds `pool4` (the four as deployments: least-busy, cooldown_s 1, health_path
/health every 0.5 s) and `solo` (a model without deployments, that is a pool of one, on the first
fake, with the same pool settings). Three phases, blocking chat completions at concurrency 64:

  A1  `solo` for --solo-duration seconds: the gateway's CPU per request with a pool of one;
  B   `pool4` for --duration seconds (20); at --kill-at (10 s) the third fake is SIGKILLed, at
      --restart-at (15 s) it is started again on its port;
  A2  `solo` again, so that a slow minute on the host does not pass for a cost of the pool.

It reports the errors clients saw (any status but 200, any transport error; target 0), requests
per second in the windows before the kill, in the --after-window seconds after it, while one is
down and after the restart (from the load generator's timeline, sampled every 0.5 s, with the
slowest 0.5 s of each window), the deployments that answered in each window (inferd's usage rows),
when the restarted fake got traffic again, and the gateway's CPU per request over phase B against
the mean of A1 and A2 (target: at most 1.10x). Exit status 1 when any client saw an error.

Method as bench/overhead.py's: inferd pinned to core 0 (`taskset -c 0`), the fakes and the load
generator (bench/_loadgen.py) to core 1; gateway CPU per request is the change in utime+stime of
the gateway's process tree (/proc) over the measured phase divided by its successful requests.

Run: `.venv/bin/python bench/pools.py` (about a minute), `--quick` (about 20 s, shorter phases),
`--json results.json` to keep the numbers. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import orjson

sys.dont_write_bytecode = True  # no __pycache__ beside the helpers below
from _loadgen import tree_cpu_seconds  # noqa: E402
from _report import NOISE_WARNING, fmt  # noqa: E402
from _targets import BENCH, ROOT, BenchError, Children, Target, start_inferd, start_upstream  # noqa: E402

CPU_RATIO_TARGET = 1.10
NAMES = ("u1", "u2", "u3", "u4")  # the fakes; `solo` runs on the first
VICTIM = 2  # u3: killed in phase B
SAMPLE_S = 0.5  # the load generator's timeline step
POOL_SETTINGS = """\
type = "chat"
engine = "openai"
upstream_model = "mock"
context_length = 4096
tokenizer = "upstream"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}
routing = "least-busy"
cooldown_s = {cooldown}
health_path = "/health"
health_interval_s = {health_interval}
"""
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy


class Upstream:
    """One fake upstream: its name, port and current process id (None once killed)."""

    def __init__(self, name: str, pid: int, port: int) -> None:
        self.name, self.pid, self.port = name, pid, port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def catalogue(upstreams: list[Upstream], cooldown: float, health_interval: float) -> str:
    """The TOML catalogue: `pool4` over every fake, `solo` on the first."""
    settings = POOL_SETTINGS.format(cooldown=cooldown, health_interval=health_interval)
    text = f'[[models]]\nid = "pool4"\n{settings}'
    for upstream in upstreams:
        text += f'\n[[models.deployments]]\nname = "{upstream.name}"\nbase_url = "{upstream.base_url}"\n'
    text += f'\n[[models]]\nid = "solo"\n{settings}base_url = "{upstreams[0].base_url}"\n'
    return text


def fake_call(upstream: Upstream, method: str, path: str) -> Any:
    """A call to a fake's own routes (/_reset, /_requests); its JSON."""
    request = urllib.request.Request(f"http://127.0.0.1:{upstream.port}{path}", method=method,
                                     data=b"" if method == "POST" else None)
    with _OPENER.open(request, timeout=10) as response:
        return orjson.loads(response.read())


# ---------------------------------------------------------------------------------------------
# One load-generator run


def run_load(children: Children, args: argparse.Namespace, target: Target, duration: float,
             client_pids: list[int], during: Callable[[float], dict[str, Any]] | None = None
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load `target` for `duration` measured seconds; (the load generator's result, what `during` returned).

    With `during`, the load generator keeps a timeline and `during(epoch of the measured phase's
    start)` runs in this thread while the load goes on.
    """
    argv = [sys.executable, str(BENCH / "_loadgen.py"), "--url", target.url,
            "--body", orjson.dumps(target.body(args.mode)).decode(), "--concurrency", str(args.concurrency),
            "--warmup", str(args.warmup), "--duration", str(duration),
            "--cores", f"{args.gateway_core},{args.client_core}" if args.pin else ""]
    argv += [f"--client-pid={pid}" for pid in client_pids]
    argv += [f"--header={name}: {value}" for name, value in target.headers.items()]
    if args.mode == "stream":
        argv.append("--stream")
    if target.pid is not None:
        argv += ["--gateway-pid", str(target.pid)]
    if during is not None:
        argv += ["--timeline", str(SAMPLE_S)]
    process = subprocess.Popen(children.pinned(args.client_core, argv), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)
    children.processes.append(("loadgen", process))
    errors: list[bytes] = []
    measuring = threading.Event()
    started: list[float] = []

    def read_stderr() -> None:
        for line in process.stderr:  # type: ignore[union-attr]
            if line.startswith(b"measuring ") and not started:
                started.append(float(line.split()[1]))
                measuring.set()
            else:
                errors.append(line)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    timeout = args.warmup + duration + 60
    watchdog = threading.Timer(timeout, lambda: children.stop(process, grace=1))
    watchdog.start()
    events: dict[str, Any] = {}
    try:
        if during is not None:
            if not measuring.wait(args.warmup + 30):
                raise BenchError("the load generator did not start measuring:\n"
                                 + b"".join(errors).decode(errors="replace")[-2000:])
            events = during(started[0])
        stdout = process.stdout.read()  # type: ignore[union-attr]
        process.wait()
    finally:
        watchdog.cancel()
        children.stop(process)
        children.forget(process)
        reader.join(5)
    if process.returncode != 0 or not stdout.strip():
        raise BenchError(f"load generator failed ({process.returncode}, limit {timeout:.0f}s):\n"
                         f"{b''.join(errors).decode(errors='replace')[-2000:]}")
    return orjson.loads(stdout.splitlines()[-1]), events


def chaos(children: Children, args: argparse.Namespace, upstreams: list[Upstream]) -> Callable[[float], dict[str, Any]]:
    """What happens during phase B: the kill, the restart, the restarted fake's first traffic."""

    def during(epoch: float) -> dict[str, Any]:
        def wait_until(offset: float) -> None:
            time.sleep(max(0.0, epoch + offset - time.time()))

        victim = upstreams[VICTIM]
        events: dict[str, Any] = {"epoch": epoch, "victim": victim.name, "victim_port": victim.port}
        wait_until(args.kill_at)
        process = next(p for name, p in children.processes if p.pid == victim.pid)
        events["victim_cpu_s"] = tree_cpu_seconds(victim.pid)  # lost from the load generator's sum once dead
        os.killpg(victim.pid, signal.SIGKILL)
        events["kill_at"] = time.time() - epoch
        process.wait(5)
        children.forget(process)
        victim.pid = None  # type: ignore[assignment]
        if not args.restart_at:
            return events
        wait_until(args.restart_at)
        events["restart_at"] = time.time() - epoch
        victim.pid, _ = start_upstream(children, args.client_core, f"{victim.name}-restarted", victim.port)
        events["restart_ready_at"] = time.time() - epoch
        # Poll the restarted fake (it keeps its last 200 requests) until a call reaches it.
        while time.time() < epoch + args.duration:
            try:
                if fake_call(victim, "GET", "/_requests"):
                    events["restart_first_traffic_by"] = time.time() - epoch
                    break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return events

    return during


# ---------------------------------------------------------------------------------------------
# Windows of phase B


def windows(args: argparse.Namespace, events: dict[str, Any], end: float) -> list[tuple[str, float, float]]:
    """(label, start, end) in seconds of phase B's measured phase."""
    kill = events["kill_at"]
    after = min(kill + args.after_window, end)
    restart = events.get("restart_at")
    spans = [("before kill", 0.0, kill), (f"kill, next {args.after_window:g} s", kill, after)]
    if restart is not None and restart > after:
        spans += [("one down", after, restart), ("after restart", restart, end)]
    else:
        spans.append(("after", after, end))
    return [(label, start, stop) for label, start, stop in spans if stop - start >= SAMPLE_S]


def window_figures(timeline: list[list[float]], start: float, stop: float) -> dict[str, Any]:
    """Requests/s, errors, the slowest sample step and gateway CPU per request, between the samples
    nearest to start and stop."""
    def nearest(t: float) -> int:
        return min(range(len(timeline)), key=lambda index: abs(timeline[index][0] - t))

    first, last = nearest(start), nearest(stop)
    if last <= first:
        return {}
    t0, ok0, failed0, cpu0 = timeline[first]
    t1, ok1, failed1, cpu1 = timeline[last]
    steps = [(timeline[i + 1][1] - timeline[i][1]) / (timeline[i + 1][0] - timeline[i][0])
             for i in range(first, last) if timeline[i + 1][0] > timeline[i][0]]
    ok = ok1 - ok0
    return {"from_s": t0, "to_s": t1, "ok": ok, "failed": failed1 - failed0,
            "rps": (ok + failed1 - failed0) / (t1 - t0),
            "min_step_rps": min(steps, default=0.0), "gateway_cpu_us_per_req": (cpu1 - cpu0) / ok * 1e6 if ok else None}


def answered_by(data_dir: Path, epoch: float, kill_at: float, restart_at: float | None,
                spans: list[tuple[str, float, float]]) -> dict[str, Any]:
    """From inferd's usage rows of `pool4`: calls answered per deployment in each window; the restarted fake's first."""
    database = data_dir / "inferd.db"
    if not database.exists():
        return {}
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        rows = connection.execute("SELECT deployment, created_at FROM usage_rows WHERE model = 'pool4'").fetchall()
    seconds = []
    for deployment, created in rows:
        moment = created if isinstance(created, datetime) else datetime.fromisoformat(str(created))
        seconds.append((deployment, moment.replace(tzinfo=timezone.utc).timestamp() - epoch))
    table = {}
    for label, start, stop in spans:
        counts = dict.fromkeys(NAMES, 0)
        for deployment, at in seconds:
            if start <= at < stop:
                counts[deployment] = counts.get(deployment, 0) + 1
        table[label] = counts
    victim = sorted(at for deployment, at in seconds if deployment == NAMES[VICTIM])
    # A row is written when its call ends: calls answered just before the kill may land just after it.
    dead = [at for at in victim if kill_at <= at < (restart_at or float("inf"))]
    back = [at for at in victim if restart_at and at >= restart_at]
    return {"by_window": table, "rows": len(seconds),
            "victim_last_answer_before_kill_s": max((at for at in victim if at < kill_at), default=None),
            "victim_answers_while_dead": len(dead), "victim_last_answer_while_dead_s": dead[-1] if dead else None,
            "victim_answers_after_restart": len(back), "victim_first_answer_after_restart_s": back[0] if back else None}


# ---------------------------------------------------------------------------------------------
# Report


def other_share(result: dict[str, Any], uncounted_cpu_s: float = 0.0) -> float | None:
    """What anything else used on the two cores, in cores' worth, less CPU the load generator could not see."""
    if result["foreign"] is None:
        return None
    return max(0.0, result["foreign"] - uncounted_cpu_s / result["wall_s"]) + (result["steal"] or 0.0)


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    phases, spans, events = report["phases"], report["windows"], report["events"]
    print()
    print(f"pools: 4 fake upstreams and inferd; {args.mode} chat completions at concurrency {args.concurrency}; "
          f"{args.warmup:g} s warm-up per phase; gateway on core {args.gateway_core}, fakes and load on core "
          f"{args.client_core}{'' if args.pin else ' (unpinned)'}")
    header = (f"{'phase':<30}{'seconds':>13}{'req/s':>8}{'slowest 0.5s':>14}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'gw CPU us/req':>15}{'other':>7}{'errors':>8}")
    print(header)
    print("-" * len(header))

    def phase_line(label: str, result: dict[str, Any], other: float | None) -> None:
        errors = result["failed"] + result["warmup_failed"]
        seconds = f"0-{result['wall_s']:.1f}"
        print(f"{label:<30}{seconds:>13}{result['rps']:>8.0f}{'':>14}"
              f"{fmt(result['p50_ms'], '.2f'):>9}{fmt(result['p99_ms'], '.2f'):>9}"
              f"{fmt(result['gateway_cpu_us_per_req'], '.0f'):>15}"
              f"{fmt(None if other is None else other * 100, '.0f', '%'):>7}{errors:>8}")

    phase_line("A1 solo (pool of one)", phases["solo_before"], other_share(phases["solo_before"]))
    pool = phases["pool4"]
    phase_line("B  pool4, one killed", pool, report["pool4_other"])
    for span in spans:
        figures = span["figures"]
        if not figures:
            continue
        seconds = f"{figures['from_s']:.1f}-{figures['to_s']:.1f}"
        print(f"{'   ' + span['label']:<30}{seconds:>13}{figures['rps']:>8.0f}{figures['min_step_rps']:>14.0f}"
              f"{'':>9}{'':>9}{fmt(figures['gateway_cpu_us_per_req'], '.0f'):>15}{'':>7}{figures['failed']:>8}")
    phase_line("A2 solo (pool of one)", phases["solo_after"], other_share(phases["solo_after"]))

    print()
    kill = events.get("kill_at")
    line = f"{events['victim']} (port {events['victim_port']}) SIGKILLed at {kill:.2f} s"
    if "restart_at" in events:
        line += (f"; started again at {events['restart_at']:.2f} s, listening at {events['restart_ready_at']:.2f} s, "
                 f"first call reached it by {fmt(events.get('restart_first_traffic_by'), '.2f', ' s')}")
    print(line)
    print(f"failovers logged by inferd: {report['failovers_logged']}")
    answers = report.get("answered_by") or {}
    if answers:
        line = (f"{events['victim']} in inferd's usage rows: last answer before the kill at "
                f"{fmt(answers['victim_last_answer_before_kill_s'], '.2f', ' s')}; "
                f"{answers['victim_answers_while_dead']} rows written after the kill")
        if answers["victim_last_answer_while_dead_s"] is not None:
            line += f" (the last at {answers['victim_last_answer_while_dead_s']:.2f} s: calls it had answered)"
        if "restart_at" in events:
            line += (f"; {answers['victim_answers_after_restart']} answers after the restart, the first at "
                     f"{fmt(answers['victim_first_answer_after_restart_s'], '.2f', ' s')}")
        print(line)
    answered = report.get("answered_by", {}).get("by_window")
    if answered:
        print("\ncalls answered per deployment (inferd's usage rows)")
        print(f"{'window':<27}" + "".join(f"{name:>8}" for name in NAMES))
        for label, counts in answered.items():
            print(f"{label:<27}" + "".join(f"{counts.get(name, 0):>8}" for name in NAMES))

    ratio = report["cpu_ratio"]
    print()
    print(f"gateway CPU per request: pool4 {fmt(pool['gateway_cpu_us_per_req'], '.0f')} us over phase B "
          f"(before the kill {fmt(report['pool4_before_kill_cpu_us'], '.0f')} us); pool of one "
          f"{fmt(report['solo_cpu_us'], '.0f')} us (mean of A1 "
          f"{fmt(phases['solo_before']['gateway_cpu_us_per_req'], '.0f')} and A2 "
          f"{fmt(phases['solo_after']['gateway_cpu_us_per_req'], '.0f')})")
    words = {True: "MET", False: "NOT MET", None: "not measured"}
    print(f"target: client errors in phase B = 0: {report['errors_b']} -> {words[report['errors_b'] == 0]}")
    print(f"target: CPU per request pool4 / pool of one <= {CPU_RATIO_TARGET:.2f}x: {fmt(ratio, '.3f', 'x')} "
          f"(before the kill {fmt(report['cpu_ratio_before_kill'], '.3f', 'x')}) -> "
          f"{words[None if ratio is None else ratio <= CPU_RATIO_TARGET]}")
    if report["errors_all"]:
        print(f"\nFAILURES: {report['errors_all']} (all phases, warm-ups included)", file=sys.stderr)
        for sample in report["failure_samples"]:
            print(f"  {sample}", file=sys.stderr)
    others = [report["pool4_other"], other_share(phases["solo_before"]), other_share(phases["solo_after"])]
    if any(other is not None and other > NOISE_WARNING for other in others):
        print(f"\nwarning: something else used more than {NOISE_WARNING:.0%} of a core on the benchmark's cores "
              f"('other') in some phase; the CPU figures are unreliable, run again on a quiet machine", file=sys.stderr)


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="shorter phases: solo 2 s, pool4 8 s, kill at 3 s, restart at 5.5 s")
    parser.add_argument("--duration", type=float, default=None, help="seconds of phase B (default 20)")
    parser.add_argument("--kill-at", type=float, default=None, help="second of phase B to kill u3 at (default 10)")
    parser.add_argument("--restart-at", type=float, default=None,
                        help="second of phase B to start u3 again at (default 15; 0: never)")
    parser.add_argument("--after-window", type=float, default=None,
                        help="seconds after the kill reported on their own (default 3)")
    parser.add_argument("--solo-duration", type=float, default=None, help="seconds of each solo phase (default 5)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds of warm-up per phase (default 1)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--mode", choices=("blocking", "stream"), default="blocking",
                        help="stream: streams cut by the kill after their first byte fail by design (no failover after a byte)")
    parser.add_argument("--cooldown", type=float, default=1.0, help="pool cooldown_s (default 1)")
    parser.add_argument("--health-interval", type=float, default=0.5, help="pool health_interval_s (default 0.5)")
    parser.add_argument("--gateway-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1, help="core for the fakes and the load generator")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not use taskset")
    parser.add_argument("--inferd-bin", default=str(ROOT / ".venv" / "bin" / "inferd"))
    parser.add_argument("--inferd-startup-timeout", type=float, default=90.0)
    parser.add_argument("--json", metavar="FILE", help="also write every figure and the timelines to FILE")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary directory with child logs")
    args = parser.parse_args(argv)
    defaults = {"duration": (8.0, 20.0), "kill_at": (3.0, 10.0), "restart_at": (5.5, 15.0),
                "after_window": (1.5, 3.0), "solo_duration": (2.0, 5.0), "warmup": (0.5, 1.0)}
    for name, (quick, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if not 0 < args.kill_at < args.duration:
        parser.error("--kill-at must fall inside --duration")
    if args.restart_at and not args.kill_at < args.restart_at < args.duration:
        parser.error("--restart-at must fall between --kill-at and --duration (or be 0)")
    if args.pin and (shutil.which("taskset") is None or (os.cpu_count() or 1) < 2):
        print("warning: no taskset or fewer than two cores; running unpinned", file=sys.stderr)
        args.pin = False
    return args


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    work_dir = Path(tempfile.mkdtemp(prefix="inferd-bench-pools-"))
    children = Children(work_dir, args.pin)
    try:
        upstreams = []
        for name in NAMES:
            pid, port = start_upstream(children, args.client_core, name)
            upstreams.append(Upstream(name, pid, port))
        inferd = start_inferd(children, args.gateway_core, upstreams[0].port, work_dir, args.inferd_bin, {},
                              args.inferd_startup_timeout,
                              config_text=catalogue(upstreams, args.cooldown, args.health_interval))
        base_url = inferd.url.removesuffix("/chat/completions")
        solo = Target("solo", base_url, "solo", inferd.pid, inferd.headers, usage_option=False)
        pool = Target("pool4", base_url, "pool4", inferd.pid, inferd.headers, usage_option=False)
        solo.preflight()
        for _ in NAMES:  # least-busy spreads sequential calls: reach every deployment once
            pool.preflight()

        def all_pids() -> list[int]:
            return [upstream.pid for upstream in upstreams if upstream.pid]

        phases: dict[str, dict[str, Any]] = {}
        print(f"A1 solo {args.solo_duration:g} s ...", file=sys.stderr, flush=True)
        phases["solo_before"], _ = run_load(children, args, solo, args.solo_duration, all_pids())
        for upstream in upstreams:
            fake_call(upstream, "POST", "/_reset")
        print(f"B  pool4 {args.duration:g} s, u3 killed at {args.kill_at:g} s"
              f"{f', started again at {args.restart_at:g} s' if args.restart_at else ''} ...",
              file=sys.stderr, flush=True)
        phases["pool4"], events = run_load(children, args, pool, args.duration, all_pids(),
                                           during=chaos(children, args, upstreams))
        restarted_cpu = tree_cpu_seconds(upstreams[VICTIM].pid) if upstreams[VICTIM].pid else 0.0
        print(f"A2 solo {args.solo_duration:g} s ...", file=sys.stderr, flush=True)
        phases["solo_after"], _ = run_load(children, args, solo, args.solo_duration, all_pids())
        log = (work_dir / "inferd.log").read_text(errors="replace")
        failovers = sum(1 for line in log.splitlines() if "of model pool4 failed" in line)
        timeline = phases["pool4"]["timeline"]
        end = timeline[-1][0]
        spans = windows(args, events, end)
        window_rows = [{"label": label, "start_s": start, "end_s": stop,
                        "figures": window_figures(timeline, start, stop)} for label, start, stop in spans]
        answered = answered_by(work_dir / "inferd-data", events["epoch"], events["kill_at"],
                               events.get("restart_at"), spans)
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

    solo_values = [phases[name]["gateway_cpu_us_per_req"] for name in ("solo_before", "solo_after")
                   if phases[name]["gateway_cpu_us_per_req"]]
    solo_cpu = sum(solo_values) / len(solo_values) if solo_values else None
    pool_cpu = phases["pool4"]["gateway_cpu_us_per_req"]
    before_kill = window_rows[0]["figures"].get("gateway_cpu_us_per_req") if window_rows else None
    errors_b = phases["pool4"]["failed"] + phases["pool4"]["warmup_failed"]
    errors_all = sum(result["failed"] + result["warmup_failed"] for result in phases.values())
    report = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "kernel": os.uname().release},
        "settings": {key: getattr(args, key) for key in (
            "duration", "kill_at", "restart_at", "after_window", "solo_duration", "warmup", "concurrency", "mode",
            "cooldown", "health_interval", "pin", "gateway_core", "client_core")},
        "targets": {"client_errors": 0, "cpu_ratio_max": CPU_RATIO_TARGET},
        "phases": phases, "events": events, "windows": window_rows, "answered_by": answered,
        "failovers_logged": failovers,
        # The killed fake's CPU and the restarted one's are not in the load generator's sum.
        "pool4_other": other_share(phases["pool4"], events.get("victim_cpu_s", 0.0) + restarted_cpu),
        "solo_cpu_us": solo_cpu,
        "pool4_before_kill_cpu_us": before_kill,
        "cpu_ratio": pool_cpu / solo_cpu if pool_cpu and solo_cpu else None,
        "cpu_ratio_before_kill": before_kill / solo_cpu if before_kill and solo_cpu else None,
        "errors_b": errors_b, "errors_all": errors_all,
        "failure_samples": [sample for result in phases.values() for sample in result["failure_samples"]][:5],
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print_report(report, args)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        print(f"\nwrote {args.json}")
    return 1 if errors_all else 0


if __name__ == "__main__":
    sys.exit(main())

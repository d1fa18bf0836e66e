"""What inferd costs on top of the floor any Python gateway pays.

The same load three ways: straight at the fake upstream (`direct`), through a bare aiohttp
passthrough proxy (`passthrough`, bench/passthrough.py, the floor), and through inferd with auth,
limits and metering on (`inferd`); blocking and streaming; at concurrency 1 and 64. For each cell
it prints req/s, p50/p99 latency and the gateway's CPU microseconds per request, then the ratios
against the targets: inferd's CPU per request at most 1.5x the passthrough's, and at most +1 ms
on the p50 at concurrency 1. With `--targets ...,messages` the same prompt also goes to inferd's
Anthropic route (POST /v1/messages, same server), and its CPU per request is compared with chat
completions' (target: at most 1.3x); `responses` does the same for OpenAI's Responses API (POST
/v1/responses, stored as by default).

Method: the gateway under test runs pinned to one core (`taskset -c 0`), the fake upstream and the
load generator (bench/_loadgen.py) on the other (`taskset -c 1`). Gateway CPU per request is the
change in utime+stime of the gateway's process tree (/proc/<pid>/stat) over the measured phase,
divided by the successful requests completed in it. Each run warms up first; cells are interleaved
(direct, passthrough, inferd back to back for each mode and concurrency, `--repeat` rounds) and
each figure is the median over the rounds, so a noisy minute on the host hits all three alike.

Run: `.venv/bin/python bench/overhead.py` (about 3 minutes), `--quick` (under a minute),
`--json results.json` to keep the numbers. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.dont_write_bytecode = True  # no __pycache__ beside the helpers below
from _report import (CPU_RATIO_TARGET, NOISE_WARNING, P50_DELTA_TARGET_MS, compare, compare_messages,  # noqa: E402
                     fmt, print_comparison, print_messages_comparison, print_table, summarise)
from _targets import (BENCH, MODES, ROOT, BenchError, Children, Target, start_inferd, start_passthrough,  # noqa: E402
                      start_upstream)

TARGETS = ("direct", "passthrough", "inferd", "messages", "responses")


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
        argv += ["--stream", f"--stream-end={target.stream_end}"]
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


# ---------------------------------------------------------------------------------------------


def progress(result: dict[str, Any]) -> str:
    """One run in one line."""
    other = None if result["foreign"] is None else (result["foreign"] + result["steal"]) * 100
    failed = result["failed"] + result["warmup_failed"]
    return (f"{result['rps']:8.0f} req/s  p50 {fmt(result['p50_ms'], '.3f')} ms  "
            f"gw CPU {fmt(result['gateway_cpu_us_per_req'], '.0f')} us/req  other {fmt(other, '.0f', '%')}"
            f"{f'  FAILED {failed}' if failed else ''}")


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
    parser.add_argument("--targets", default="direct,passthrough,inferd",
                        help="comma list of direct,passthrough,inferd,messages,responses (messages, responses: "
                             "POST /v1/messages or /v1/responses on the inferd server, compared with its chat "
                             "completions)")
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
        inferd: Target | None = None  # the inferd server, shared by the inferd, messages and responses targets
        for name in args.targets:
            try:
                if name == "direct":
                    target = Target("direct", f"http://127.0.0.1:{upstream_port}/v1", "mock", None)
                elif name == "passthrough":
                    target = start_passthrough(children, args.gateway_core, upstream_port)
                else:
                    if inferd is None:
                        extra_env = dict(item.split("=", 1) for item in args.inferd_env)
                        inferd = start_inferd(children, args.gateway_core, upstream_port, work_dir, args.inferd_bin,
                                              extra_env, args.inferd_startup_timeout)
                    # messages: the same server's Anthropic route, so the two compare on one process
                    target = inferd if name == "inferd" else Target(
                        name, inferd.url.rsplit("/", 2)[0], inferd.model, inferd.pid, inferd.headers,
                        usage_option=False, messages=name == "messages", responses=name == "responses")
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
                          f"round {round_number + 1}: {progress(result)}", file=sys.stderr, flush=True)
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
    messages_comparison = compare_messages(cells, args.concurrency, args.modes)
    if messages_comparison["rows"]:
        print_messages_comparison(messages_comparison)
    responses_comparison = compare_messages(cells, args.concurrency, args.modes, "responses")
    if responses_comparison["rows"]:
        print_messages_comparison(responses_comparison)
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
            "cells": cells, "comparison": comparison, "messages_comparison": messages_comparison,
            "responses_comparison": responses_comparison,
            "not_measured": problems,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        Path(args.json).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        print(f"\nwrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

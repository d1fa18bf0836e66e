"""bench/overhead.py's summaries, comparisons and tables."""

from __future__ import annotations

import statistics
from typing import Any

CPU_RATIO_TARGET = 1.5
MESSAGES_RATIO_TARGET = 1.3  # POST /v1/messages against chat completions, CPU per request
P50_DELTA_TARGET_MS = 1.0
NOISE_WARNING = 0.10  # of a core used by anything else on the two cores during a measured phase


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


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def print_table(cells: list[dict[str, Any]]) -> None:
    """One line per (target, mode, concurrency)."""
    header = (f"{'target':<12}{'mode':<10}{'conc':>5}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'gw CPU us/req':>15}{'gw core':>9}{'client core':>13}{'other':>7}{'failed':>8}")
    print(header)
    print("-" * len(header))
    for cell in cells:
        s = cell["summary"]
        busy = (lambda v: fmt(None if v is None else min(v, 1.0) * 100, ".0f", "%"))  # ticks round past 100
        other = None if s["foreign"] is None else s["foreign"] + (s["steal"] or 0.0)
        print(f"{cell['target']:<12}{cell['mode']:<10}{cell['concurrency']:>5}{fmt(s['rps'], '.0f'):>10}"
              f"{fmt(s['p50_ms'], '.3f'):>9}{fmt(s['p99_ms'], '.3f'):>9}"
              f"{fmt(s['gateway_cpu_us_per_req'], '.0f'):>15}{busy(s['gateway_core_busy']):>9}"
              f"{busy(s['client_core_busy']):>13}{busy(other):>7}{s['failed']:>8}")


def compare(cells: list[dict[str, Any]], concurrencies: list[int], modes: list[str]) -> dict[str, Any]:
    """inferd against the passthrough (and direct): ratios, deltas and the verdict on the targets."""
    by_key = {(cell["target"], cell["mode"], cell["concurrency"]): cell["summary"] for cell in cells}
    runs_by_key = {(cell["target"], cell["mode"], cell["concurrency"]): cell["runs"] for cell in cells}
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
                # The same ratio round by round (each pair ran back to back): its spread shows the noise.
                row["cpu_ratio_by_round"] = [
                    mine["gateway_cpu_us_per_req"] / floor["gateway_cpu_us_per_req"]
                    for mine, floor in zip(runs_by_key[("inferd", mode, concurrency)],
                                           runs_by_key[("passthrough", mode, concurrency)])
                    if mine["gateway_cpu_us_per_req"] and floor["gateway_cpu_us_per_req"]]
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
    print(f"{'mode':<10}{'conc':>5}{'CPU inferd/passthrough':>24}{'(by round)':>13}{'p50 +ms vs passthrough':>24}"
          f"{'p50 +ms vs direct':>19}{'passthrough +ms vs direct':>27}")
    for row in comparison["rows"]:
        ratio = fmt(row.get("cpu_ratio"), ".2f", "x")
        if "cpu_ok" in row:
            ratio += " ok" if row["cpu_ok"] else " OVER"
        delta = fmt(row.get("p50_delta_vs_passthrough_ms"), "+.3f")
        if "p50_ok" in row:
            delta += " ok" if row["p50_ok"] else " OVER"
        by_round = row.get("cpu_ratio_by_round") or []
        spread = "-" if not by_round else (f"{min(by_round):.2f}" if len(by_round) == 1
                                           else f"{min(by_round):.2f}-{max(by_round):.2f}")
        print(f"{row['mode']:<10}{row['concurrency']:>5}{ratio:>24}{spread:>13}{delta:>24}"
              f"{fmt(row.get('p50_delta_vs_direct_ms'), '+.3f'):>19}"
              f"{fmt(row.get('passthrough_p50_delta_vs_direct_ms'), '+.3f'):>27}")
    print()
    words = {True: "MET", False: "NOT MET", None: "not measured"}
    print(f"target: inferd CPU per request <= {CPU_RATIO_TARGET}x the passthrough's (every cell): "
          f"{words[comparison['cpu_target_met']]}")
    print(f"target: inferd p50 <= passthrough p50 + {P50_DELTA_TARGET_MS:g} ms at concurrency 1: "
          f"{words[comparison['p50_target_met']]}")


def compare_messages(cells: list[dict[str, Any]], concurrencies: list[int], modes: list[str],
                     target: str = "messages") -> dict[str, Any]:
    """The messages target (or another route of the same server: `responses`) against inferd's chat
    completions: CPU per request, ratio by round."""
    by_key = {(cell["target"], cell["mode"], cell["concurrency"]): cell for cell in cells}
    rows = []
    for mode in modes:
        for concurrency in concurrencies:
            messages, chat = by_key.get((target, mode, concurrency)), by_key.get(("inferd", mode, concurrency))
            if not (messages and chat and messages["summary"]["gateway_cpu_us_per_req"]
                    and chat["summary"]["gateway_cpu_us_per_req"]):
                continue
            ratio = messages["summary"]["gateway_cpu_us_per_req"] / chat["summary"]["gateway_cpu_us_per_req"]
            rows.append({"mode": mode, "concurrency": concurrency, "cpu_ratio": ratio,
                         "cpu_ok": ratio <= MESSAGES_RATIO_TARGET,
                         "messages_cpu_us": messages["summary"]["gateway_cpu_us_per_req"],
                         "chat_cpu_us": chat["summary"]["gateway_cpu_us_per_req"],
                         "cpu_ratio_by_round": [
                             mine["gateway_cpu_us_per_req"] / other["gateway_cpu_us_per_req"]
                             for mine, other in zip(messages["runs"], chat["runs"])
                             if mine["gateway_cpu_us_per_req"] and other["gateway_cpu_us_per_req"]]})
    met = all(row["cpu_ok"] for row in rows) if rows else None
    return {"rows": rows, "cpu_target_met": met, "target": target}


def print_messages_comparison(comparison: dict[str, Any]) -> None:
    """POST /v1/messages (or /v1/responses) against chat completions on the same server."""
    name = comparison.get("target", "messages")
    print()
    print(f"{'mode':<10}{'conc':>5}{'chat us/req':>13}{name + ' us/req':>17}{name + '/chat':>15}{'(by round)':>13}")
    for row in comparison["rows"]:
        by_round = row["cpu_ratio_by_round"]
        spread = "-" if not by_round else (f"{min(by_round):.2f}" if len(by_round) == 1
                                           else f"{min(by_round):.2f}-{max(by_round):.2f}")
        verdict = f"{row['cpu_ratio']:.2f}x {'ok' if row['cpu_ok'] else 'OVER'}"
        print(f"{row['mode']:<10}{row['concurrency']:>5}{row['chat_cpu_us']:>13.0f}{row['messages_cpu_us']:>17.0f}"
              f"{verdict:>15}{spread:>13}")
    words = {True: "MET", False: "NOT MET", None: "not measured"}
    print(f"target: POST /v1/{name} CPU per request <= {MESSAGES_RATIO_TARGET}x chat completions' (every cell): "
          f"{words[comparison['cpu_target_met']]}")

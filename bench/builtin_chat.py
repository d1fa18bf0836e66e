"""Built-in chat model: generation tokens/s and time to first token through inferd, against
llama-cpp-python called directly in one process, on the same prompts and sampling; then the
same streamed requests 1, 2, 4 and 8 at once through inferd.

    .venv/bin/python bench/builtin_chat.py [--max-tokens 128] [--rounds 2] [--concurrency 1,2,4,8] [--no-direct]

Direct runs first (the model in this process, `create_chat_completion(stream=True)`), then the
model is freed and `inferd serve` starts with the built-in catalogue; the same streamed requests
go through it over loopback. Greedy sampling, one request at a time. Tokens/s counts completion
tokens after the first one over the time since the first one; TTFT is from sending the request
to the first content. Target: inferd within 5% of direct on both.

Concurrency: each round sends N streamed requests at once (the prompts in turn) and waits for all;
aggregate tokens/s is every completion token of the round over the round's wall time (first send
to last end). TTFT p50 and max are over every request of the level. Target (issue 15, part 3):
4 at once give at least 2x the aggregate tokens/s of 1 at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from _builtin_server import builtin_server  # noqa: E402

PROMPTS = [
    "Write a Python function that checks whether a number is prime, with a docstring.",
    "Explain the difference between a list and a tuple in Python.",
    "Write a SQL query that returns the ten most recent orders per customer.",
    "Describe how a hash map handles collisions.",
]


def direct(max_tokens: int, rounds: int) -> list[dict[str, float]]:
    """Stream each prompt from llama-cpp-python in this process."""
    from llama_cpp import Llama

    from inferd.engines.weights import QWEN_CODER_05B

    model_dir = Path(os.environ.get("INFERD_MODEL_DIR", "~/.cache/inferd/models")).expanduser()
    llm = Llama(model_path=str(QWEN_CODER_05B.assemble(model_dir)), n_ctx=8192, n_threads=os.cpu_count() or 2,
                n_threads_batch=os.cpu_count() or 2, verbose=False)
    results = []
    try:
        for _ in range(rounds):
            for prompt in PROMPTS:
                sent = time.perf_counter()
                first = None
                pieces = 0
                for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": prompt}], stream=True,
                                                        temperature=0, top_p=1.0, max_tokens=max_tokens):
                    delta = chunk["choices"][0]["delta"]
                    if delta.get("content"):
                        pieces += 1
                        if first is None:
                            first = time.perf_counter()
                end = time.perf_counter()
                assert first is not None
                results.append({"ttft_ms": (first - sent) * 1000, "tokens_per_s": (pieces - 1) / (end - first)})
    finally:
        llm.close()
    return results


def through_inferd(max_tokens: int, rounds: int) -> list[dict[str, float]]:
    """Stream each prompt through `inferd serve` with the built-in catalogue."""
    with builtin_server() as (url, key):
        results = []
        with httpx.Client(timeout=300, headers={"Authorization": f"Bearer {key}"}) as client:
            for _ in range(rounds):
                for prompt in PROMPTS:
                    body = {"model": "fast", "stream": True, "temperature": 0, "top_p": 1.0,
                            "max_tokens": max_tokens, "messages": [{"role": "user", "content": prompt}]}
                    sent = time.perf_counter()
                    first = None
                    completion = 0
                    with client.stream("POST", url + "/chat/completions", json=body) as response:
                        for line in response.iter_lines():
                            if not line.startswith("data: {"):
                                continue
                            chunk: dict[str, Any] = json.loads(line[6:])
                            if chunk.get("usage"):
                                completion = chunk["usage"]["completion_tokens"]
                            if chunk["choices"] and chunk["choices"][0]["delta"].get("content") and first is None:
                                first = time.perf_counter()
                    end = time.perf_counter()
                    assert first is not None
                    results.append({"ttft_ms": (first - sent) * 1000,
                                    "tokens_per_s": (completion - 1) / (end - first)})
        return results


async def _one(client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> dict[str, float]:
    """One streamed greedy request: (TTFT ms, completion tokens, end time)."""
    body = {"model": "fast", "stream": True, "temperature": 0, "top_p": 1.0, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}]}
    sent = time.perf_counter()
    first = None
    completion = 0
    async with client.stream("POST", url + "/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk: dict[str, Any] = json.loads(line[6:])
            if chunk.get("usage"):
                completion = chunk["usage"]["completion_tokens"]
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content") and first is None:
                first = time.perf_counter()
    assert first is not None and completion > 0
    return {"ttft_ms": (first - sent) * 1000, "tokens": completion, "end": time.perf_counter()}


async def _levels(url: str, key: str, levels: list[int], max_tokens: int, rounds: int) -> list[dict[str, float]]:
    rows = []
    async with httpx.AsyncClient(timeout=600, headers={"Authorization": f"Bearer {key}"},
                                 limits=httpx.Limits(max_connections=64)) as client:
        await _one(client, url, PROMPTS[0], 8)  # warm-up: the first request pays for page faults
        for level in levels:
            ttfts: list[float] = []
            rates: list[float] = []
            load = os.getloadavg()[0]
            for r in range(rounds):
                started = time.perf_counter()
                results = await asyncio.gather(*(_one(client, url, PROMPTS[(r * level + i) % len(PROMPTS)], max_tokens)
                                                 for i in range(level)))
                wall = max(x["end"] for x in results) - started
                rates.append(sum(x["tokens"] for x in results) / wall)
                ttfts.extend(x["ttft_ms"] for x in results)
            rows.append({"level": level, "tokens_per_s": statistics.median(rates), "ttft_p50": statistics.median(ttfts),
                         "ttft_max": max(ttfts), "load": (load + os.getloadavg()[0]) / 2})
    return rows


def concurrency(levels: list[int], max_tokens: int, rounds: int) -> list[dict[str, float]]:
    """Aggregate tokens/s and TTFT with N streamed requests at once, for each N in `levels`."""
    with builtin_server() as (url, key):
        return asyncio.run(_levels(url, key, levels, max_tokens, rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="1,2,4,8", help="levels, comma-separated ('' to skip)")
    parser.add_argument("--no-direct", action="store_true", help="skip the direct vs inferd comparison")
    args = parser.parse_args()
    levels = [int(n) for n in args.concurrency.split(",") if n]
    if levels:
        print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
        rows_by_level = concurrency(levels, args.max_tokens, args.rounds)
        print(f"{'at once':>7} {'aggregate tok/s':>16} {'x of 1':>7} {'TTFT p50 ms':>12} {'TTFT max ms':>12} "
              f"{'load':>5}")
        base = rows_by_level[0]["tokens_per_s"]
        for row in rows_by_level:
            print(f"{row['level']:7d} {row['tokens_per_s']:16.1f} {row['tokens_per_s'] / base:7.2f} "
                  f"{row['ttft_p50']:12.0f} {row['ttft_max']:12.0f} {row['load']:5.2f}")
    if args.no_direct:
        return
    rows = {"direct": direct(args.max_tokens, args.rounds), "inferd": through_inferd(args.max_tokens, args.rounds)}
    summary = {name: {metric: statistics.median(r[metric] for r in runs) for metric in ("ttft_ms", "tokens_per_s")}
               for name, runs in rows.items()}
    print(f"{'path':8} {'TTFT p50 ms':>12} {'tokens/s p50':>13}")
    for name, values in summary.items():
        print(f"{name:8} {values['ttft_ms']:12.1f} {values['tokens_per_s']:13.1f}")
    speed = summary["inferd"]["tokens_per_s"] / summary["direct"]["tokens_per_s"]
    ttft = summary["inferd"]["ttft_ms"] / summary["direct"]["ttft_ms"]
    print(f"inferd/direct: tokens/s {speed:.3f}x, TTFT {ttft:.3f}x; "
          f"target within 5%: {'MET' if speed >= 0.95 and ttft <= 1.05 else 'NOT MET'}")


if __name__ == "__main__":
    main()

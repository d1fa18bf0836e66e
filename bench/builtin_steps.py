"""The ceiling of batching for the built-in chat model on this CPU: the time of one `llama_decode`
step that carries the next token of k sequences, for k = 1..8, with the context the batching engine
uses (one KV cache shared by the sequences, logits for every row).

    .venv/bin/python bench/builtin_steps.py [--ks 1,2,3,4,5,6,7,8] [--reps 12] [--context 100] [--model GGUF]

Each sequence first reads a `--context`-token prompt; then each k decodes `--reps` steps and the
median step is reported. k tokens per step over k times the one-token step is the most that k
requests decoding together can gain over one at a time, before any server work: the engine's
aggregate tokens/s (builtin_chat.py --concurrency) can approach it, not pass it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", default="1,2,3,4,5,6,7,8")
    parser.add_argument("--reps", type=int, default=12)
    parser.add_argument("--context", type=int, default=100)
    parser.add_argument("--model", help="a GGUF file (default: the built-in chat model's)")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]

    import llama_cpp
    from llama_cpp import Llama

    from inferd.engines.weights import QWEN_CODER_05B

    model_dir = Path(os.environ.get("INFERD_MODEL_DIR", "~/.cache/inferd/models")).expanduser()
    path = args.model or str(QWEN_CODER_05B.assemble(model_dir))
    weights = Llama(model_path=path, n_ctx=16, n_batch=16, verbose=False)
    sequences = max(ks)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = (args.context + args.reps * len(ks) + 256) * sequences
    params.n_batch = params.n_ubatch = 512
    params.n_seq_max = sequences
    params.kv_unified = True
    params.n_threads = params.n_threads_batch = os.cpu_count() or 2
    params.no_perf = True
    ctx = llama_cpp.llama_init_from_model(weights.model, params)
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    positions = [0] * sequences

    def put(i: int, token: int, seq: int, logits: bool) -> None:
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, positions[seq], 1, logits
        batch.seq_id[i][0] = seq
        positions[seq] += 1

    def decode(n: int) -> float:
        batch.n_tokens = n
        started = time.perf_counter()
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")
        return time.perf_counter() - started

    try:
        for seq in range(sequences):
            for k in range(args.context):
                put(k, 1000 + (k * 7 + seq) % 5000, seq, k == args.context - 1)
            decode(args.context)
        print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
        print(f"{'k':>3} {'step ms':>8} {'ms/token':>9} {'tokens/s':>9} {'x of k=1':>9}")
        one = None
        for k in ks:
            steps = []
            for rep in range(args.reps):
                for seq in range(k):
                    put(seq, 2000 + rep * 13 + seq, seq, True)
                steps.append(decode(k))
            step = statistics.median(steps)
            one = one or step
            print(f"{k:3d} {step * 1000:8.1f} {step * 1000 / k:9.1f} {k / step:9.1f} {k * one / step:9.2f}")
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
        weights.close()


if __name__ == "__main__":
    main()

"""What the built-in chat model's weight format does to batching, speed and answers.

    .venv/bin/python bench/builtin_weights.py [--types Q8_0,F16,IQ4_NL,Q4_0] [--ks 1,4] [--keep DIR]

Each type is made from the shipped GGUF with llama.cpp's own quantizer (every matrix, the output
matrix and the token embeddings included; requantizing from the shipped Q4_K_M mix, as a user
without the original weights would), then measured against the shipped file:

- size on disk;
- one `llama_decode` step of k sequences (`builtin_steps.py --model`): tokens/s at each k and
  the gain of k over one, the most k requests decoding together can reach;
- perplexity on 15 windows of 512 tokens (code from this Python's standard library, this
  repository's README and docs), scored on each window's last 256 tokens, with the mean KL
  divergence from the shipped file's next-token distribution and how often both pick the same
  greedy token (top-1 agreement).

The quantizer takes 5 to 70 seconds a type on two cores; `--keep` keeps the files.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

WINDOW, SCORED_FROM = 512, 256


def texts() -> list[Path]:
    """The evaluation texts: every twelfth module of the standard library, then our own prose."""
    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[::12][:14]
    return stdlib + [ROOT / "README.md", ROOT / "bench" / "README.md"]


def quantize(source: Path, target: Path, type_name: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{type_name}")
    params.output_tensor_type = params.token_embedding_type = getattr(llama_cpp, f"GGML_TYPE_{type_name}")
    params.allow_requantize = True
    params.pure = True  # one type everywhere, so the row says what that type does
    params.nthread = os.cpu_count() or 2
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama_model_quantize failed for {type_name}")


def steps(model: Path, ks: str) -> dict[int, float]:
    """tokens/s by k, from builtin_steps.py in its own process (one model in memory at a time)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "builtin_steps.py"), "--model", str(model), "--ks", ks],
                         check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    return {int(row[0]): float(row[3]) for row in rows}


class Scorer:
    """Log-probabilities of every window's scored tokens under one model."""

    def __init__(self, model: Path) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(model), n_ctx=WINDOW, n_batch=WINDOW, logits_all=True, verbose=False,
                         n_threads=os.cpu_count() or 2)

    def windows(self) -> list[list[int]]:
        chunks = []
        for path in texts():
            tokens = self.llm.tokenize(path.read_text(encoding="utf-8", errors="replace").encode(), add_bos=False)
            if len(tokens) >= WINDOW:
                start = min(len(tokens) // 3, len(tokens) - WINDOW)
                chunks.append(tokens[start:start + WINDOW])
        return chunks

    def log_probs(self, window: list[int]):  # -> numpy array (scored positions x vocabulary)
        import numpy as np

        self.llm.reset()
        self.llm.eval(window)
        logits = np.asarray(self.llm.scores[:WINDOW], dtype=np.float64)[SCORED_FROM - 1:WINDOW - 1]
        logits -= logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))

    def close(self) -> None:
        self.llm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default="Q8_0,F16,IQ4_NL,Q4_0")
    parser.add_argument("--ks", default="1,4")
    parser.add_argument("--keep", type=Path, help="keep the requantized files in this folder")
    args = parser.parse_args()

    import numpy as np

    from inferd.engines.weights import QWEN_CODER_05B

    shipped = QWEN_CODER_05B.assemble(Path(os.environ.get("INFERD_MODEL_DIR", "~/.cache/inferd/models")).expanduser())
    folder = args.keep or Path(tempfile.mkdtemp(prefix="inferd-weights-"))
    folder.mkdir(parents=True, exist_ok=True)
    ks = [int(k) for k in args.ks.split(",")]

    reference = Scorer(shipped)
    windows = reference.windows()
    ref = [reference.log_probs(w) for w in windows]
    reference.close()
    picked = np.concatenate([np.array(w[SCORED_FROM:]) for w in windows])

    def row(name: str, model: Path, scored: list) -> None:
        nll = -np.concatenate([lp[np.arange(len(lp)), np.array(w[SCORED_FROM:])] for lp, w in zip(scored, windows)])
        kl = np.concatenate([(np.exp(r) * (r - c)).sum(axis=1) for r, c in zip(ref, scored)]).mean()
        top1 = np.concatenate([r.argmax(1) == c.argmax(1) for r, c in zip(ref, scored)]).mean()
        speed = steps(model, args.ks)
        cells = "".join(f" {speed[k]:8.1f}" for k in ks)
        print(f"{name:10s} {model.stat().st_size / 1e6:7.0f} {math.exp(nll.mean()):7.3f} {kl:7.4f} {top1 * 100:6.1f}%"
              f"{cells} {speed[ks[-1]] / speed[ks[0]]:8.2f}x", flush=True)

    print(f"{len(windows)} windows of {WINDOW} tokens, {len(picked)} scored; load average {os.getloadavg()[0]:.2f}")
    heads = "".join(f" {'tok/s k=' + str(k):>8s}" for k in ks)
    print(f"{'weights':10s} {'MB':>7s} {'ppl':>7s} {'KL':>7s} {'top-1':>7s}{heads} {'gain':>9s}")
    row("shipped", shipped, ref)
    try:
        for type_name in args.types.split(","):
            target = folder / f"qwen2.5-coder-0.5b-instruct-{type_name.lower()}.gguf"
            if not target.exists():
                quantize(shipped, target, type_name)
            scorer = Scorer(target)
            scored = [scorer.log_probs(w) for w in windows]
            scorer.close()
            row(type_name, target, scored)
    finally:
        if args.keep is None:
            for path in folder.glob("*.gguf"):
                path.unlink()
            folder.rmdir()


if __name__ == "__main__":
    main()

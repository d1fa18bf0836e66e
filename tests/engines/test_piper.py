"""The built-in speech model (piper, voice joe): every format decodes as itself; a long text is
voiced a piece at a time, so the server's memory peak does not grow with it."""

from __future__ import annotations

import io
import wave
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pytest

from inferd.engines.audio_codec import decode_to_pcm
from tests.harness import Backend, Server, Upstream, auth, serving

SENTENCE = "The quick brown fox jumps over the lazy dog."
MAGIC = {"mp3": (b"ID3", b"\xff\xfb", b"\xff\xf3"), "opus": (b"OggS",), "aac": (b"\xff\xf1", b"\xff\xf9"),
         "flac": (b"fLaC",), "wav": (b"RIFF",)}
TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac", "wav": "audio/wav",
         "pcm": "audio/pcm"}


@pytest.mark.parametrize("audio_format", sorted(TYPES))
def test_every_format_decodes(builtin_sdk: openai.OpenAI, audio_format: str) -> None:
    audio = builtin_sdk.audio.speech.create(model="tts", voice="joe", input=SENTENCE, response_format=audio_format)  # type: ignore[arg-type]
    assert audio.response.headers["content-type"] == TYPES[audio_format]
    data = audio.content
    if audio_format == "pcm":
        seconds = len(data) / 2 / 24_000  # raw 24 kHz 16-bit mono
    else:
        assert data.startswith(MAGIC[audio_format])
        seconds = len(decode_to_pcm(data)) / 16_000
    assert 1.5 < seconds < 6, seconds


def test_speed_changes_the_length(builtin: Server, builtin_key: str) -> None:
    def seconds(speed: float) -> float:
        reply = httpx.post(builtin.v1 + "/audio/speech", headers=auth(builtin_key), timeout=60,
                           json={"model": "tts", "voice": "joe", "input": SENTENCE, "speed": speed,
                                 "response_format": "pcm"})
        return len(reply.content) / 2 / 24_000

    assert seconds(2.0) < 0.7 * seconds(1.0)


def test_unknown_voice_names_the_voices(builtin: Server, builtin_key: str) -> None:
    reply = httpx.post(builtin.v1 + "/audio/speech", headers=auth(builtin_key),
                       json={"model": "tts", "voice": "alloy", "input": "hi"})
    assert reply.status_code == 400 and "joe" in reply.json()["error"]["message"]


def test_voices_and_usage(builtin: Server, builtin_key: str) -> None:
    assert httpx.get(builtin.v1 + "/voices", headers=auth(builtin_key)).json() == ["joe"]
    httpx.post(builtin.v1 + "/audio/speech", headers=auth(builtin_key), timeout=60,
               json={"model": "piper-joe", "voice": "joe", "input": SENTENCE})
    row = [r for r in builtin.usage_rows(builtin_key) if r["status_code"] == 200][-1]
    assert row["workspace"] == "audio" and row["prompt_tokens"] == len(SENTENCE) and row["cost_usd"] == 0


PIPER_ONLY_TOML = """
[[models]]
id = "piper-joe"
builtin = true
"""


@pytest.fixture(scope="module")
def voice_only(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """A server with the built-in voice alone, so that its memory peak is the voice's."""
    with serving(tmp_path_factory.mktemp("voice-only"), backend, upstream, PIPER_ONLY_TOML) as srv:
        yield srv


def reset_peak(pid: int) -> None:
    """Bring the process's VmHWM down to its VmRSS, so that a later peak is this test's."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def memory_mib(pid: int, field: str) -> float:
    """A /proc/PID/status memory figure (VmRSS, VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for process {pid}")


def test_a_long_sentence_is_voiced_in_pieces_within_bounded_memory(voice_only: Server) -> None:
    key = voice_only.create_key()

    def speak(text: str, speed: float) -> httpx.Response:
        return httpx.post(voice_only.v1 + "/audio/speech", headers=auth(key), timeout=300,
                          json={"model": "piper-joe", "voice": "joe", "input": text, "speed": speed,
                                "response_format": "wav"})

    assert speak("Hello.", 1.0).status_code == 200  # the voice's first run sets up its buffers
    reset_peak(voice_only.process.pid)
    before = memory_mib(voice_only.process.pid, "VmRSS")
    # One sentence of 400 characters, no punctuation, spoken at half speed: about 50 seconds.
    # Voiced at once, the voice holds about 20 MB a second of it (a peak past 1 GB).
    sentence = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike " * 6)[:400]
    reply = speak(sentence, 0.5)
    assert reply.status_code == 200, reply.text
    grown = memory_mib(voice_only.process.pid, "VmHWM") - before
    with wave.open(io.BytesIO(reply.content)) as wav:
        seconds = wav.getnframes() / wav.getframerate()
    assert 35 < seconds < 80, seconds  # every piece is spoken, none twice
    assert grown < 600, f"the server's peak grew {grown:.0f} MiB"

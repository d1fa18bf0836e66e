"""The built-in speech model (piper, voice joe): every format decodes as itself."""

from __future__ import annotations


import httpx
import openai
import pytest

from inferd.engines.audio_codec import decode_to_pcm
from tests.harness import Server, auth

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

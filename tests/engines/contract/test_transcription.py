"""The transcription contract (TranscriptionEngine), run against every engine that serves asr models."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from inferd.engines.base import TranscriptionEngine
from inferd.errors import InvalidRequest
from tests.engines.contract.engines import Live, assert_openai_transport_failures, capabilities_of, implemented, \
    live_engine
from tests.harness import Upstream

live = live_engine(TranscriptionEngine)

# The fake upstream reports 1.5 s for whatever it is sent, so the file is made that long and both
# engines must report the same duration.
SECONDS = 1.5
RATE = 16_000
FIELDS = {"model": "mock", "language": "en"}


@pytest.fixture(scope="module")
def wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1.5 s 16 kHz mono WAV: a quiet 220 Hz tone, short enough that Whisper decodes it in a moment."""
    t = np.arange(int(SECONDS * RATE)) / RATE
    samples = (0.2 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")
    path = tmp_path_factory.mktemp("contract-asr") / "tone.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(samples.tobytes())
    return path


def test_serves_transcription_and_only_its_own_capabilities(live: Live[TranscriptionEngine]) -> None:
    assert isinstance(live.engine, TranscriptionEngine)
    assert implemented(live.engine) == capabilities_of(live.name)


def test_transcribe_returns_text_and_the_audio_duration(live: Live[TranscriptionEngine], wav: Path) -> None:
    result = live.call(lambda e: e.transcribe(str(wav), "tone.wav", dict(FIELDS)))
    assert isinstance(result, dict) and isinstance(result["text"], str)
    assert result["duration"] == pytest.approx(SECONDS, abs=0.05)
    assert result["language"] == "en"  # as asked
    for segment in result["segments"]:
        assert 0 <= segment["start"] <= segment["end"] <= SECONDS + 0.05 and isinstance(segment["text"], str)


# A file the built-in model refuses; the fake upstream accepts whatever it is sent.
@pytest.mark.parametrize("live", ["whisper"], indirect=True)
def test_unreadable_audio_raises_invalid_request(live: Live[TranscriptionEngine], tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(b"this is not audio at all")
    with pytest.raises(InvalidRequest) as caught:
        live.call(lambda e: e.transcribe(str(junk), "junk.mp3", dict(FIELDS)))
    assert caught.value.status == 400 and str(tmp_path) not in str(caught.value)  # no server paths leak


def test_openai_transport_failures_raise_engine_errors(upstream: Upstream, wav: Path) -> None:
    assert_openai_transport_failures(upstream, TranscriptionEngine,
                                     lambda e: e.transcribe(str(wav), "tone.wav", dict(FIELDS)))

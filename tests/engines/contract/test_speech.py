"""The speech contract (SpeechEngine), run against every engine that serves tts models."""

from __future__ import annotations

from typing import Any

import pytest

from inferd.engines.base import SpeechEngine
from inferd.errors import InvalidRequest
from tests.engines.contract.engines import Live, assert_openai_transport_failures, capabilities_of, implemented, \
    live_engine
from tests.harness import Upstream

live = live_engine(SpeechEngine)

# A voice each engine offers: the fake upstream lists alloy, the built-in model speaks only with joe.
VOICE = {"openai": "alloy", "piper": "joe"}
SHORT = "Hello there."


def speech_request(engine_name: str, **fields: Any) -> dict[str, Any]:
    """An OpenAI speech request for a short sentence in one of the engine's voices."""
    return {"model": "mock", "input": SHORT, "voice": VOICE[engine_name], "response_format": "wav", **fields}


def voice_ids(listing: Any) -> list[str]:
    """Voice ids from a listing as an engine gives it: a list of names, or OpenAI's `{data: [{id}]}`."""
    items = listing.get("data", []) if isinstance(listing, dict) else listing
    return [item["id"] if isinstance(item, dict) else item for item in items]


def test_serves_speech_and_only_its_own_capabilities(live: Live[SpeechEngine]) -> None:
    assert isinstance(live.engine, SpeechEngine)
    assert implemented(live.engine) == capabilities_of(live.name)


def test_lists_the_voice_it_speaks_with(live: Live[SpeechEngine]) -> None:
    assert VOICE[live.name] in voice_ids(live.call(lambda e: e.voices()))


def test_speech_returns_audio_and_its_content_type(live: Live[SpeechEngine]) -> None:
    audio, content_type = live.call(lambda e: e.speech(speech_request(live.name)))
    assert isinstance(audio, bytes) and len(audio) > 0
    assert content_type.startswith("audio/")


# A request the built-in voice refuses; the fake upstream has no refusal of its own for speech.
@pytest.mark.parametrize("live", ["piper"], indirect=True)
def test_unknown_voice_raises_invalid_request(live: Live[SpeechEngine]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        live.call(lambda e: e.speech(speech_request(live.name, voice="alloy")))
    assert caught.value.status == 400 and "joe" in str(caught.value)  # the error names the voices there are


def test_openai_transport_failures_raise_engine_errors(upstream: Upstream) -> None:
    assert_openai_transport_failures(upstream, SpeechEngine, lambda e: e.speech(speech_request("openai")))
    assert_openai_transport_failures(upstream, SpeechEngine, lambda e: e.voices())

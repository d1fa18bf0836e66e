"""POST /v1/audio/speech and GET /v1/voices over the openai engine."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.harness import Server, Upstream, auth


def test_speech_is_relayed_with_its_content_type_and_billed_per_character(
        server: Server, app_key: str, sdk: openai.OpenAI, upstream: Upstream) -> None:
    audio = sdk.audio.speech.create(model="mock-tts", voice="alloy", input="Hello there", response_format="flac")
    assert audio.content == b"FAKEAUDIO:Hello there"
    assert audio.response.headers["content-type"] == "audio/flac"
    sent = [r for r in upstream.requests() if r["path"] == "/v1/audio/speech"][-1]["body"]
    assert sent["voice"] == "alloy" and sent["model"] == "mock"
    row = server.usage_rows(app_key)[-1]
    assert row["workspace"] == "audio" and row["prompt_tokens"] == len("Hello there") and row["completion_tokens"] == 0
    assert row["cost_usd"] == pytest.approx(len("Hello there") * 10.0 / 1e6)


def test_voices_are_forwarded_as_listed(server: Server, app_key: str) -> None:
    listed = httpx.get(server.v1 + "/voices", params={"model": "mock-tts"}, headers=auth(app_key))
    assert listed.status_code == 200
    assert listed.json() == {"data": [{"id": "alloy"}, {"id": "echo", "language": "en"}]}
    assert server.usage_rows(app_key)[-1]["workspace"] == "audio"


@pytest.mark.parametrize(("body", "field"), [
    ({"input": "x", "voice": "alloy"}, "model"),
    ({"model": "mock-tts", "input": "x", "voice": "alloy", "response_format": "ogg"}, "response_format"),
    ({"model": "mock-tts", "input": "x", "voice": "alloy", "speed": 9}, "speed"),
])
def test_speech_validation(server: Server, app_key: str, body: dict, field: str) -> None:
    response = httpx.post(server.v1 + "/audio/speech", headers=auth(app_key), json=body)
    assert response.status_code == 400 and response.json()["error"]["message"].startswith(field)


def test_speech_needs_a_tts_model_and_a_budget(server: Server, app_key: str) -> None:
    body = {"model": "mock-chat", "input": "x", "voice": "alloy"}
    assert httpx.post(server.v1 + "/audio/speech", headers=auth(app_key), json=body).status_code == 400
    broke = server.create_key(budget_usd=0)
    body = {"model": "mock-tts", "input": "x", "voice": "alloy"}
    assert httpx.post(server.v1 + "/audio/speech", headers=auth(broke), json=body).status_code == 402
    assert httpx.get(server.v1 + "/voices", params={"model": "mock-tts"}, headers=auth(broke)).status_code == 402

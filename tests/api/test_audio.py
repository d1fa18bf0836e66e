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


def _multipart(parts: list[tuple[bytes, bytes]]) -> tuple[bytes, dict[str, str]]:
    """A multipart body written byte for byte (clients escape what this test needs to send raw):
    (the Content-Disposition parameters, the content) per part."""
    boundary = b"inferd-test-boundary"
    body = b"".join(b"--%s\r\nContent-Disposition: form-data; %s\r\n\r\n%s\r\n" % (boundary, disposition, content)
                    for disposition, content in parts)
    return body + b"--%s--\r\n" % boundary, {"content-type": f"multipart/form-data; boundary={boundary.decode()}"}


def _sent_transcription(upstream: Upstream) -> dict:
    return [r for r in upstream.requests() if r["path"] == "/v1/audio/transcriptions"][-1]


def test_control_characters_in_a_transcriptions_names_are_taken_out_before_it_goes_upstream(
        server: Server, app_key: str, upstream: Upstream) -> None:
    # A file name and field names with NUL, DEL, ESC, a C1 control and a line feed; values with
    # them too (a line break of the prompt becomes a space). Sent on as they were, aiohttp refused
    # them ("Forbidden control character detected in headers"): a 500.
    body, headers = _multipart([
        (b'name="file"; filename="my\x00 voice\x7f\x1b[0m\xc2\x85\nnote.wav"', b"RIFF1234"),
        (b'name="mo\x7fdel"', b"whisper-1"),
        (b'name="language\x1b"', b"e\x00n"),
        (b'name="prompt"', b"line one\r\nline two\x1b[2J\x07\tend"),
        (b'name="\x01\x02"', b"a field whose name is nothing but control characters"),
    ])
    response = httpx.post(server.v1 + "/audio/transcriptions", params={"model": "mock-asr"}, content=body,
                          headers={**auth(app_key), **headers}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json() == {"text": "fake transcript"}
    sent = _sent_transcription(upstream)
    assert sent["filename"] == "my voice[0mnote.wav"
    assert sent["body"] == {"model": "whisper-1", "language": "en", "prompt": "line one line two[2J end",
                            "response_format": "verbose_json", "file_bytes": 8}


def test_unicode_names_reach_the_upstream_as_they_are(server: Server, app_key: str, upstream: Upstream) -> None:
    files = {"file": ("réunion du 会议 🎙.wav", b"RIFF1234")}
    response = httpx.post(server.v1 + "/audio/transcriptions", params={"model": "mock-asr"}, headers=auth(app_key),
                          files=files, data={"model": "whisper-1", "längé": "ça va", "prompt": "Grüße, 你好"},
                          timeout=30)
    assert response.status_code == 200, response.text
    sent = _sent_transcription(upstream)
    assert sent["filename"] == "réunion du 会议 🎙.wav"  # not percent-encoded on the way
    assert sent["body"]["längé"] == "ça va" and sent["body"]["prompt"] == "Grüße, 你好"


def test_a_text_field_named_file_does_not_go_upstream_beside_the_audio(
        server: Server, app_key: str, upstream: Upstream) -> None:
    body, headers = _multipart([(b'name="file"', b"not the audio"), (b'name="file"; filename="a.wav"', b"RIFF1234")])
    response = httpx.post(server.v1 + "/audio/transcriptions", params={"model": "mock-asr"}, content=body,
                          headers={**auth(app_key), **headers}, timeout=30)
    assert response.status_code == 200, response.text
    assert _sent_transcription(upstream)["body"]["file_bytes"] == 8

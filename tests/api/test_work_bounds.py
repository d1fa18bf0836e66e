"""Bounded work per request, through the running server: embeddings take
at most 2048 inputs, rerank at most 1000 documents, transcription at most `[audio] max_duration_s`
of audio (decided before the engine decodes it); plain-format transcripts come back byte for byte;
speech takes at most 4096 characters at a speed of 0.25 to 4, image generation at most 10 images
of at most 2048x2048, all refused before the limits (no rate-limit slot, no usage row)."""

from __future__ import annotations

import io
import re
import subprocess
import wave
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pytest

from inferd.config import load_catalogue
from inferd.engines.registry import default_registry
from inferd.errors import ConfigError
from tests.fakes.upstream import EDGE_TRANSCRIPTS
from tests.harness import INFERD, Backend, Server, Upstream, auth, clean_env, serving

CAP_S = 4
CAPPED_TOML = """
[[models]]
id = "mock-asr"
type = "asr"
base_url = "{upstream}/v1"
upstream_model = "mock"

[[models]]
id = "whisper-tiny-en"
builtin = true

[[models]]
id = "piper-joe"
builtin = true

[audio]
max_duration_s = %d
""" % CAP_S


def wav_bytes(seconds: float, rate: int = 16_000) -> bytes:
    """A 440 Hz tone of `seconds`, mono 16-bit WAV."""
    samples = (np.sin(np.arange(int(seconds * rate)) * 2 * np.pi * 440 / rate) * 8000).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())
    return out.getvalue()


def transcribe(server: Server, key: str, model: str, data: bytes, response_format: str = "json",
               engine_model: str = "whisper-1") -> httpx.Response:
    return httpx.post(server.v1 + "/audio/transcriptions", params={"model": model}, headers=auth(key),
                      files={"file": ("a.wav", data)}, data={"response_format": response_format, "model": engine_model},
                      timeout=120)


def assert_refused(reply: httpx.Response, param: str, code: str = "invalid_request") -> None:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == code
    assert error["param"] == param and error["message"].startswith(param)


# --- embeddings and rerank -------------------------------------------------------------------

def test_embeddings_take_at_most_2048_inputs(server: Server) -> None:
    key = server.create_key()
    url = server.v1 + "/embeddings"
    refused = httpx.post(url, headers=auth(key), json={"model": "mock-embed", "input": ["w"] * 2049}, timeout=60)
    assert_refused(refused, "input")
    assert "2048" in refused.json()["error"]["message"]
    assert server.usage_rows(key) == []  # refused before the engine: nothing billed
    accepted = httpx.post(url, headers=auth(key), json={"model": "mock-embed", "input": ["w"] * 2048}, timeout=60)
    assert accepted.status_code == 200 and len(accepted.json()["data"]) == 2048
    # An array of integers is one tokenized input, however long.
    tokens = httpx.post(url, headers=auth(key), json={"model": "mock-embed", "input": list(range(3000))}, timeout=60)
    assert tokens.status_code == 200, tokens.text


def test_rerank_takes_at_most_1000_documents(server: Server) -> None:
    key = server.create_key()
    url = server.v1 + "/rerank"
    body = {"model": "mock-rerank", "query": "fox", "documents": [f"doc {i}" for i in range(1001)]}
    refused = httpx.post(url, headers=auth(key), json=body, timeout=60)
    assert_refused(refused, "documents")
    assert "1000" in refused.json()["error"]["message"]
    assert server.usage_rows(key) == []
    accepted = httpx.post(url, headers=auth(key), json={**body, "documents": body["documents"][:1000]}, timeout=60)
    assert accepted.status_code == 200 and len(accepted.json()["results"]) == 1000


# --- transcripts relayed unchanged -------------------------------------------------------------

@pytest.mark.parametrize("response_format", sorted(EDGE_TRANSCRIPTS))
def test_plain_transcripts_from_an_upstream_are_relayed_byte_for_byte(
        server: Server, upstream: Upstream, response_format: str) -> None:
    key = server.create_key()
    reply = transcribe(server, key, "mock-asr", b"RIFF1234", response_format, engine_model="mock-edges")
    assert reply.status_code == 200, reply.text
    assert reply.content == EDGE_TRANSCRIPTS[response_format]  # leading space and trailing newlines kept
    assert reply.headers["content-type"].startswith("text/")
    sent = [r for r in upstream.requests() if r["path"] == "/v1/audio/transcriptions"][-1]["body"]
    assert sent["response_format"] == response_format  # asked for as such, not rebuilt from verbose_json
    row = server.usage_rows(key)[-1]
    assert row["status_code"] == 200 and row["completion_tokens"] == len("fake transcript")


def test_json_transcripts_still_come_from_verbose_json(server: Server, upstream: Upstream) -> None:
    key = server.create_key()
    reply = transcribe(server, key, "mock-asr", b"RIFF1234", "verbose_json")
    assert reply.status_code == 200 and reply.json()["segments"][0]["text"] == " fake transcript"
    sent = [r for r in upstream.requests() if r["path"] == "/v1/audio/transcriptions"][-1]["body"]
    assert sent["response_format"] == "verbose_json"


# --- [audio] max_duration_s --------------------------------------------------------------------

@pytest.mark.parametrize(("table", "fragment"), [
    ("[audio]\nmax_seconds = 5\n", "unknown key (known: max_duration_s)"),
    ('[audio]\nmax_duration_s = "long"\n', "expected int or float"),
    ("[audio]\nmax_duration_s = true\n", "expected int or float"),
    ("[audio]\nmax_duration_s = 0\n", "must be positive"),
    ("audio = 5\n", "expected a table"),
])
def test_audio_table_is_checked(tmp_path: Path, table: str, fragment: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(table)
    with pytest.raises(ConfigError) as caught:
        load_catalogue(config, default_registry().option_keys())
    message = str(caught.value)
    assert message.startswith(str(config)) and "[audio]" in message and fragment in message, message


def test_audio_table_defaults_to_an_hour_and_is_read(tmp_path: Path) -> None:
    config = tmp_path / "inferd.toml"
    config.write_text("[audio]\nmax_duration_s = 90.5\n")
    assert load_catalogue(config, default_registry().option_keys()).audio.max_duration_s == 90.5
    config.write_text("")
    assert load_catalogue(config, default_registry().option_keys()).audio.max_duration_s == 3600


def test_a_bad_audio_table_fails_at_start(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[audio]\nmax_duration_s = -1\n")
    result = subprocess.run([INFERD, "serve", "--config", str(config), "--data-dir", str(tmp_path / "d"),
                             "--port", "1"], capture_output=True, text=True, env=clean_env({}), timeout=60)
    assert result.returncode != 0
    assert str(config) in result.stderr and "[audio], key 'max_duration_s'" in result.stderr


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """A server that transcribes at most CAP_S seconds, with an HTTP and an in-process ASR model."""
    with serving(tmp_path_factory.mktemp("capped"), backend, upstream, CAPPED_TOML) as srv:
        yield srv


def _transcriptions_sent(upstream: Upstream) -> int:
    return len([r for r in upstream.requests() if r["path"] == "/v1/audio/transcriptions"])


def test_audio_past_the_cap_never_reaches_an_upstream(capped: Server, upstream: Upstream) -> None:
    key = capped.create_key()
    before = _transcriptions_sent(upstream)
    refused = transcribe(capped, key, "mock-asr", wav_bytes(CAP_S + 2))
    assert_refused(refused, "file", code="audio_too_long")
    assert f"{CAP_S} seconds" in refused.json()["error"]["message"]
    assert _transcriptions_sent(upstream) == before and capped.usage_rows(key) == []
    assert transcribe(capped, key, "mock-asr", wav_bytes(CAP_S - 1)).status_code == 200
    # What PyAV cannot read goes on: the upstream knows its own formats and answers for them.
    assert transcribe(capped, key, "mock-asr", b"RIFF1234").status_code == 200
    assert _transcriptions_sent(upstream) == before + 2


def test_a_long_file_within_the_upload_limit_is_refused(capped: Server) -> None:
    key = capped.create_key()
    # 8 kHz 16-bit: 40 minutes in 38 MB, well inside the 75 MiB upload limit.
    refused = transcribe(capped, key, "whisper-tiny-en", wav_bytes(2400, rate=8000))
    assert_refused(refused, "file", code="audio_too_long")


def test_the_in_process_engine_is_capped_and_its_plain_formats_are_unchanged(capped: Server) -> None:
    key = capped.create_key()
    assert_refused(transcribe(capped, key, "whisper-tiny-en", wav_bytes(CAP_S + 0.5)), "file", code="audio_too_long")
    assert capped.usage_rows(key) == []
    spoken = httpx.post(capped.v1 + "/audio/speech", headers=auth(key), timeout=60, json={
        "model": "piper-joe", "voice": "joe", "input": "Hello there.", "response_format": "wav"}).content
    with wave.open(io.BytesIO(spoken)) as wav:
        assert wav.getnframes() / wav.getframerate() < CAP_S  # within the cap: transcribed
    text = transcribe(capped, key, "whisper-tiny-en", spoken).json()["text"]
    assert "hello" in text.lower()
    plain = transcribe(capped, key, "whisper-tiny-en", spoken, "text")
    assert plain.content == (text + "\n").encode()  # the OpenAI shape: the transcript and one newline
    srt = transcribe(capped, key, "whisper-tiny-en", spoken, "srt").content.decode()
    assert srt.startswith("1\n00:00:00,000 --> ") and srt.endswith("\n\n") and "hello" in srt.lower()
    vtt = transcribe(capped, key, "whisper-tiny-en", spoken, "vtt").content.decode()
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ") and vtt.endswith("\n\n")


# --- speech and image requests: bounded before the limits ----------------------------------------

def _speech(server: Server, key: str, **fields: object) -> httpx.Response:
    body = {"model": "mock-tts", "voice": "alloy", "input": "Hello", **fields}
    return httpx.post(server.v1 + "/audio/speech", headers=auth(key), json=body, timeout=60)


def test_speech_input_and_speed_are_bounded_before_the_limits(server: Server, upstream: Upstream) -> None:
    key = server.create_key(rpm=1)
    sent = len([r for r in upstream.requests() if r["path"] == "/v1/audio/speech"])
    refused = _speech(server, key, input="a" * 4097)
    assert_refused(refused, "input")
    assert "4096" in refused.json()["error"]["message"]
    assert_refused(_speech(server, key, speed=0.2), "speed")
    assert_refused(_speech(server, key, speed=4.5), "speed")
    assert_refused(_speech(server, key, response_format="ogg"), "response_format")
    # None of the refusals reached the upstream, took the key's one request a minute or wrote a row.
    assert len([r for r in upstream.requests() if r["path"] == "/v1/audio/speech"]) == sent
    assert server.usage_rows(key) == []
    longest = _speech(server, key, input="b" * 4096, speed=0.25)
    assert longest.status_code == 200 and longest.content == b"FAKEAUDIO:" + b"b" * 4096
    assert _speech(server, key).status_code == 429  # the window holds one request: that one
    rows = server.usage_rows(key)
    assert len(rows) == 1 and rows[0]["prompt_tokens"] == 4096


def test_the_speech_schema_states_the_bounds(server: Server) -> None:
    schema = httpx.get(server.base_url + "/openapi.json").json()
    body = schema["paths"]["/v1/audio/speech"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    speech_input = body["properties"]["input"]
    assert 4096 in (speech_input.get("maxLength"), *(alt.get("maxLength") for alt in speech_input.get("anyOf", [])))
    assert body["properties"]["speed"]["minimum"] == 0.25 and body["properties"]["speed"]["maximum"] == 4.0
    image = schema["paths"]["/v1/images/generations"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert image["properties"]["n"]["maximum"] == 10
    size = re.compile(image["properties"]["size"]["pattern"])
    assert all(size.match(s) for s in ("1x1", "2048x2048", "1024x768", "8x2000"))
    assert not any(size.match(s) for s in ("2049x8", "8x2049", "0x8", "10000x10", "8x8x8"))


def _image(server: Server, key: str, **fields: object) -> httpx.Response:
    body = {"model": "t2i", "prompt": "a square", "size": "8x8", **fields}
    return httpx.post(server.v1 + "/images/generations", headers=auth(key), json=body, timeout=60)


def test_image_n_and_size_are_bounded_before_the_limits_on_every_model(server: Server) -> None:
    key = server.create_key(rpm=2)
    for fields, param in (({"size": "2049x8"}, "size"), ({"size": "8x4096"}, "size"), ({"n": 11}, "n"),
                          ({"n": 0}, "n")):
        refused = _image(server, key, **fields)
        assert_refused(refused, param)
    assert "2048x2048" in _image(server, key, size="4096x4096").json()["error"]["message"]
    assert server.usage_rows(key) == []
    largest = _image(server, key, size="2048x8", n=2)  # two images: both of the key's units a minute
    assert largest.status_code == 200 and len(largest.json()["data"]) == 2
    assert _image(server, key).status_code == 429


def test_an_upstream_image_model_judges_its_own_steps(server: Server, upstream: Upstream) -> None:
    key = server.create_key()
    reply = _image(server, key, num_inference_steps=500)
    assert reply.status_code == 200, reply.text
    sent = [r for r in upstream.requests() if r["path"] == "/v1/images/generations"][-1]["body"]
    assert sent["num_inference_steps"] == 500  # not ours to bound: the upstream pays for it

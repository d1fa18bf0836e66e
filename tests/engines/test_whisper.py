"""Transcriptions: the built-in Whisper tiny.en round trip with the built-in voice, every
response format, and uploads refused at 75 MiB without being read whole."""

from __future__ import annotations

import socket
import time

import httpx
import openai
import pytest

from tests.harness import Server, auth

SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def spoken(builtin_sdk: openai.OpenAI) -> bytes:
    """The sentence, spoken by the built-in voice, as mp3."""
    return builtin_sdk.audio.speech.create(model="tts", voice="joe", input=SENTENCE).content


def words(text: str) -> set[str]:
    return {w.strip(".,!?").lower() for w in text.split()}


def test_round_trip_recovers_the_words(builtin: Server, builtin_key: str, builtin_sdk: openai.OpenAI, spoken: bytes) -> None:
    transcript = builtin_sdk.audio.transcriptions.create(model="whisper-1", file=("speech.mp3", spoken))
    # Whisper tiny.en on a synthetic voice: all but at most one of the content words come back.
    assert len(words(transcript.text) & {"quick", "brown", "fox", "jumps", "lazy", "dog"}) >= 5, transcript.text
    row = builtin.usage_rows(builtin_key)[-1]
    assert row["workspace"] == "audio" and row["completion_tokens"] == len(transcript.text) and row["model"] == "whisper-tiny-en"


def test_every_response_format(builtin_sdk: openai.OpenAI, spoken: bytes) -> None:
    text = builtin_sdk.audio.transcriptions.create(model="whisper-1", file=("a.mp3", spoken), response_format="text")
    assert "fox" in str(text).lower()
    srt = str(builtin_sdk.audio.transcriptions.create(model="whisper-1", file=("a.mp3", spoken), response_format="srt"))
    assert srt.startswith("1\n00:00:00,000 --> 00:00:0") and "fox" in srt.lower()
    vtt = str(builtin_sdk.audio.transcriptions.create(model="whisper-1", file=("a.mp3", spoken), response_format="vtt"))
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ") and "fox" in vtt.lower()
    verbose = builtin_sdk.audio.transcriptions.create(model="whisper-1", file=("a.mp3", spoken), response_format="verbose_json")
    assert verbose.language in ("en", "english") and 1.5 < verbose.duration < 6
    assert verbose.segments and verbose.segments[0].start == 0 and "fox" in verbose.text.lower()


def test_bad_requests(builtin: Server, builtin_key: str, spoken: bytes) -> None:
    url = builtin.v1 + "/audio/transcriptions"
    bad_format = httpx.post(url, headers=auth(builtin_key), files={"file": ("a.mp3", spoken)},
                            data={"response_format": "docx"})
    assert bad_format.status_code == 400 and bad_format.json()["error"]["message"].startswith("response_format")
    no_file = httpx.post(url, headers=auth(builtin_key), data={"model": "whisper-1"}, files={"other": ("x", b"1")})
    assert no_file.status_code == 400 and no_file.json()["error"]["message"].startswith("file")
    not_audio = httpx.post(url, headers=auth(builtin_key), files={"file": ("a.mp3", b"this is not audio at all")})
    assert not_audio.status_code == 400


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_oversized_upload_is_413_without_reading_it_whole(builtin: Server, builtin_key: str) -> None:
    host, port = builtin.base_url.split("//")[1].split(":")
    before = _rss_kib(builtin.process.pid)
    head = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {builtin_key}\r\n"
            "Content-Type: multipart/form-data; boundary=XyZ\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    part = b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\n\r\n'
    chunk = b"\0" * (1024 * 1024)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head + b"%x\r\n" % len(part) + part + b"\r\n")
        started = time.monotonic()
        try:
            while sent < 100 * 1024 * 1024:  # more than 75 MiB, unless the server stops us first
                conn.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                piece = conn.recv(65536)
                if not piece:
                    break
                answer += piece
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert time.monotonic() - started < 30
    assert _rss_kib(builtin.process.pid) - before < 40 * 1024  # the upload never sat in memory


def test_declared_oversize_is_refused_at_once(builtin: Server, builtin_key: str) -> None:
    host, port = builtin.base_url.split("//")[1].split(":")
    head = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {builtin_key}\r\n"
            f"Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: {80 * 1024 * 1024}\r\n\r\n")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head.encode() + b"--XyZ\r\n")  # then nothing more: the header alone decides
        answer = b""
        while b'"type"' not in answer:
            piece = conn.recv(65536)
            if not piece:
                break
            answer += piece
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"type":"invalid_request_error"' in answer


def test_openai_engine_forwards_the_form(server: Server, app_key: str) -> None:
    reply = httpx.post(server.v1 + "/audio/transcriptions", params={"model": "mock-asr"}, headers=auth(app_key),
                       files={"file": ("a.wav", b"RIFF1234")}, data={"model": "whisper-1", "language": "en"})
    assert reply.status_code == 200 and reply.json() == {"text": "fake transcript"}
    row = server.usage_rows(app_key)[-1]
    assert row["completion_tokens"] == len("fake transcript") and row["workspace"] == "audio"

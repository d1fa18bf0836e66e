"""POST /v1/audio/speech, GET /v1/voices and POST /v1/audio/transcriptions (workspace `audio`)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response

from inferd.api.body_limits import TRANSCRIPTION_UPLOAD_BYTES
from inferd.api.deps import caller_key, metered_key, services
from inferd.api.uploads import read_upload
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import require_long_lived
from inferd.calls.stage import Answer, Billing
from inferd.catalogue import Deployment, Model
from inferd.engines.audio_codec import FORMATS, audio_seconds
from inferd.engines.base import SpeechEngine, TranscriptionEngine
from inferd.engines.transcripts import PLAIN_FORMATS, render
from inferd.errors import InvalidRequest
from inferd.protocol.audio import MAX_SPEECH_INPUT, MAX_SPEED, MIN_SPEED, SpeechRequest
from inferd.protocol.checks import MAX_MODEL_LENGTH, check_model

router = APIRouter(tags=["audio"])


def check_speech(body: Any) -> dict[str, Any]:
    """SpeechRequest: `model` is the only field the service itself requires; the format and
    speed are checked because the service encodes the audio, and `input` is at most 4096
    characters because the work (and the audio held) grows with it."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    check_model(body)
    audio_format = body.get("response_format") or "mp3"
    if audio_format not in FORMATS:
        raise InvalidRequest(f"response_format: must be one of {', '.join(FORMATS)}", param="response_format")
    speed = body.get("speed", 1.0)
    if speed is not None and (isinstance(speed, bool) or not isinstance(speed, (int, float))
                              or not MIN_SPEED <= speed <= MAX_SPEED):
        raise InvalidRequest(f"speed: must be a number from {MIN_SPEED} to {MAX_SPEED}", param="speed")
    text = body.get("input")
    if isinstance(text, str) and len(text) > MAX_SPEECH_INPUT:
        raise InvalidRequest(f"input: at most {MAX_SPEECH_INPUT} characters (this one has {len(text)})",
                             param="input")
    return body


@router.post("/v1/audio/speech", responses={200: {"content": {f"audio/{f}": {} for f in FORMATS}}},
             openapi_extra={"requestBody": {"content": {"application/json": {
                 "schema": SpeechRequest.model_json_schema()}}}})
async def speech(request: Request) -> Response:
    """Text to speech; the audio comes back in `response_format` (mp3 by default)."""
    svc = services(request)
    key = await caller_key(request)
    require_long_lived(key)
    try:
        body = check_speech(orjson.loads(await request.body()))
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"Malformed JSON body: {exc}", code="invalid_json") from None
    # Checked before the limits: a refused request takes no slot of the rate window.
    await svc.limits.admit(key, metered=True)
    model = svc.catalogue.resolve(body["model"], key)
    model.require_type(("tts",), "speech")
    characters = len(body["input"]) if isinstance(body.get("input"), str) else 0

    async def attempt(engine: SpeechEngine, deployment: Deployment, answering: Model) -> Answer[tuple[bytes, str]]:
        upstream = deployment.config.upstream_model or deployment.config.id
        spoken = await engine.speech({**body, "model": upstream,
                                      "response_format": body.get("response_format") or "mp3"})
        return Answer(spoken, characters)

    audio, content_type = (await svc.stage.call(model, SpeechEngine, Billing(key, "audio"), attempt,
                                                affinity=_affinity(request, model, body))).value
    return Response(audio, media_type=content_type)


def _affinity(request: Request, model: Model, body: dict[str, Any] | None = None) -> str | None:
    """The routing key of an `affinity` pool: the body's `user`, else the `x-session-affinity` header."""
    if model.config.routing != "affinity":
        return None
    user = (body or {}).get("user")
    return user if isinstance(user, str) and user else request.headers.get("x-session-affinity")


@router.get("/v1/voices")
async def voices(request: Request, model: str = Query("tts", max_length=MAX_MODEL_LENGTH),
                 key: KeyRecord = Depends(metered_key)) -> Response:
    """The speech model's voices, as its engine lists them."""
    svc = services(request)
    resolved = svc.catalogue.resolve(model, key)
    resolved.require_type(("tts",), "voices")

    async def attempt(engine: SpeechEngine, deployment: Deployment, answering: Model) -> Answer[Any]:
        return Answer(await engine.voices())

    listed = (await svc.stage.call(resolved, SpeechEngine, Billing(key, "audio"), attempt,
                                   affinity=_affinity(request, resolved))).value
    return Response(orjson.dumps(listed), media_type="application/json")


TRANSCRIPT_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")


def render_transcript(result: dict[str, Any], response_format: str) -> Response:
    """The transcript in the requested format; plain formats are the engine's own bytes when it
    wrote them (an upstream asked for that format), unchanged."""
    if response_format == "json":
        return Response(orjson.dumps({"text": result["text"]}), media_type="application/json")
    if response_format == "verbose_json":
        verbose = {"task": "transcribe", "language": result.get("language"), "duration": result.get("duration"),
                   "text": result["text"], "segments": result.get("segments") or []}
        return Response(orjson.dumps(verbose), media_type="application/json")
    body = result.get("body")
    if not isinstance(body, bytes):
        body = render(result, response_format)
    return Response(body, media_type=PLAIN_FORMATS[response_format])


async def check_duration(path: str, limit_s: float) -> None:
    """400 `audio_too_long` for audio that plays longer than `[audio] max_duration_s`, found by
    decoding on a worker thread and stopping just past the limit. Every engine gets this check
    (an HTTP upstream too: it costs the gateway about a second per hour of audio); a file PyAV
    cannot read goes on to the engine, which knows its own formats and answers for it."""
    seconds = await asyncio.to_thread(audio_seconds, path, limit_s)
    if seconds is not None and seconds > limit_s:
        raise InvalidRequest(f"file: the audio is longer than {limit_s:g} seconds, the longest this "
                             f"server transcribes", code="audio_too_long", param="file")


@router.post("/v1/audio/transcriptions", openapi_extra={"requestBody": {"content": {"multipart/form-data": {
    "schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary"}, "model": {"type": "string"},
        "language": {"type": "string"}, "prompt": {"type": "string"},
        "response_format": {"type": "string", "enum": list(TRANSCRIPT_FORMATS)}}}}}}})
async def transcriptions(request: Request, model: str = Query("stt", max_length=MAX_MODEL_LENGTH),
                         key: KeyRecord = Depends(metered_key)) -> Response:
    """Speech to text. The query's `model` picks the deployment; the form's `model` goes to the engine."""
    svc = services(request)
    resolved = svc.catalogue.resolve(model, key)
    resolved.require_type(("asr",), "transcriptions")
    upload = await read_upload(request, "file", TRANSCRIPTION_UPLOAD_BYTES, "Audio upload")
    try:
        response_format = upload.fields.get("response_format") or "json"
        if response_format not in TRANSCRIPT_FORMATS:
            raise InvalidRequest(f"response_format: must be one of {', '.join(TRANSCRIPT_FORMATS)}",
                                 param="response_format")
        await check_duration(str(upload.path), svc.config.audio.max_duration_s)

        # The upload lies in a file, so every attempt (a failover too) sends it whole again.
        async def attempt(engine: TranscriptionEngine, deployment: Deployment, answering: Model
                          ) -> Answer[dict[str, Any]]:
            result = await engine.transcribe(str(upload.path), upload.filename or "audio", upload.fields)
            return Answer(result, 0, len(result["text"]))

        result = (await svc.stage.call(resolved, TranscriptionEngine, Billing(key, "audio"), attempt,
                                       affinity=_affinity(request, resolved, upload.fields))).value
    finally:
        upload.discard()
    return render_transcript(result, response_format)

"""POST /v1/audio/speech, GET /v1/voices and POST /v1/audio/transcriptions (workspace `audio`): the
wire (the body, the form, the response) here, the rest in services/audio.py."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response

from inferd.api.body_limits import TRANSCRIPTION_UPLOAD_BYTES
from inferd.api.deps import caller_key, metered_key, services
from inferd.api.uploads import read_upload
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import require_long_lived
from inferd.errors import InvalidRequest
from inferd.protocol.audio import MAX_SPEECH_INPUT, MAX_SPEED, MIN_SPEED, SpeechRequest
from inferd.protocol.checks import MAX_MODEL_LENGTH, check_model
from inferd.services.audio import SPEECH_FORMATS, TRANSCRIPT_FORMATS

router = APIRouter(tags=["audio"])


def check_speech(body: Any) -> dict[str, Any]:
    """SpeechRequest: `model` is the only field the service itself requires; the format and
    speed are checked because the service encodes the audio, and `input` is at most 4096
    characters because the work (and the audio held) grows with it."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    check_model(body)
    audio_format = body.get("response_format") or "mp3"
    if audio_format not in SPEECH_FORMATS:
        raise InvalidRequest(f"response_format: must be one of {', '.join(SPEECH_FORMATS)}", param="response_format")
    speed = body.get("speed", 1.0)
    if speed is not None and (isinstance(speed, bool) or not isinstance(speed, (int, float))
                              or not MIN_SPEED <= speed <= MAX_SPEED):
        raise InvalidRequest(f"speed: must be a number from {MIN_SPEED} to {MAX_SPEED}", param="speed")
    text = body.get("input")
    if isinstance(text, str) and len(text) > MAX_SPEECH_INPUT:
        raise InvalidRequest(f"input: at most {MAX_SPEECH_INPUT} characters (this one has {len(text)})",
                             param="input")
    return body


@router.post("/v1/audio/speech", responses={200: {"content": {f"audio/{f}": {} for f in SPEECH_FORMATS}}},
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
    audio, content_type = await svc.audio.speech(key, body, request.scope["headers"])
    return Response(audio, media_type=content_type)


@router.get("/v1/voices")
async def voices(request: Request, model: str = Query("tts", max_length=MAX_MODEL_LENGTH),
                 key: KeyRecord = Depends(metered_key)) -> Response:
    """The speech model's voices, as its engine lists them."""
    listed = await services(request).audio.voices(key, model, request.scope["headers"])
    return Response(orjson.dumps(listed), media_type="application/json")


@router.post("/v1/audio/transcriptions", openapi_extra={"requestBody": {"content": {"multipart/form-data": {
    "schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary"}, "model": {"type": "string"},
        "language": {"type": "string"}, "prompt": {"type": "string"},
        "response_format": {"type": "string", "enum": list(TRANSCRIPT_FORMATS)}}}}}}})
async def transcriptions(request: Request, model: str = Query("stt", max_length=MAX_MODEL_LENGTH),
                         key: KeyRecord = Depends(metered_key)) -> Response:
    """Speech to text. The query's `model` picks the deployment; the form's `model` goes to the engine."""
    audio = services(request).audio
    resolved = audio.transcriber(model, key)
    upload = await read_upload(request, "file", TRANSCRIPTION_UPLOAD_BYTES, "Audio upload")
    try:
        response_format = upload.fields.get("response_format") or "json"
        if response_format not in TRANSCRIPT_FORMATS:
            raise InvalidRequest(f"response_format: must be one of {', '.join(TRANSCRIPT_FORMATS)}",
                                 param="response_format")
        body, media_type = await audio.transcribe(key, resolved, str(upload.path), upload.filename or "audio",
                                                  upload.fields, response_format, request.scope["headers"])
    finally:
        upload.discard()
    return Response(body, media_type=media_type)

"""Speech, voices and transcription (workspace `audio`): a model of the catalogue, the call stage
(deployment, failover, one usage row: speech priced on its input characters, a transcription on
its text's), and the answer in the format asked for (the service encodes speech and writes
transcripts, so it says which formats it knows)."""

from __future__ import annotations

import asyncio
from typing import Any, Iterable

import orjson

from inferd.auth.key_record import KeyRecord
from inferd.calls.route import affinity_key
from inferd.calls.stage import Answer, Billing, CallStage
from inferd.catalogue import Deployment, Model, ModelCatalogue
from inferd.engines.audio_codec import FORMATS, audio_seconds
from inferd.engines.base import SpeechEngine, TranscriptionEngine
from inferd.engines.transcripts import PLAIN_FORMATS, render
from inferd.errors import InvalidRequest

SPEECH_FORMATS: tuple[str, ...] = tuple(FORMATS)  # what speech can be encoded as
TRANSCRIPT_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
Headers = Iterable[tuple[bytes, bytes]]  # a request's raw headers, read for the affinity key only


def render_transcript(result: dict[str, Any], response_format: str) -> tuple[bytes, str]:
    """The transcript in the requested format, and its media type; plain formats are the engine's
    own bytes when it wrote them (an upstream asked for that format), unchanged."""
    if response_format == "json":
        return orjson.dumps({"text": result["text"]}), "application/json"
    if response_format == "verbose_json":
        verbose = {"task": "transcribe", "language": result.get("language"), "duration": result.get("duration"),
                   "text": result["text"], "segments": result.get("segments") or []}
        return orjson.dumps(verbose), "application/json"
    body = result.get("body")
    if not isinstance(body, bytes):
        body = render(result, response_format)
    return body, PLAIN_FORMATS[response_format]


async def check_duration(path: str, limit_s: float) -> None:
    """400 `audio_too_long` for audio that plays longer than `[audio] max_duration_s`, found by
    decoding on a worker thread and stopping just past the limit. Every engine gets this check
    (an HTTP upstream too: it costs the gateway about a second per hour of audio); a file PyAV
    cannot read goes on to the engine, which knows its own formats and answers for it."""
    seconds = await asyncio.to_thread(audio_seconds, path, limit_s)
    if seconds is not None and seconds > limit_s:
        raise InvalidRequest(f"file: the audio is longer than {limit_s:g} seconds, the longest this "
                             f"server transcribes", code="audio_too_long", param="file")


class AudioService:
    """catalogue -> call stage -> the audio, the voices or the transcript."""

    def __init__(self, catalogue: ModelCatalogue, stage: CallStage, max_duration_s: float) -> None:
        self._catalogue = catalogue
        self._stage = stage
        self._max_duration_s = max_duration_s  # `[audio] max_duration_s`

    async def speech(self, key: KeyRecord, body: dict[str, Any], headers: Headers) -> tuple[bytes, str]:
        """The audio of a checked speech request and its content type (`response_format`, mp3 by default)."""
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(("tts",), "speech")
        characters = len(body["input"]) if isinstance(body.get("input"), str) else 0

        async def attempt(engine: SpeechEngine, deployment: Deployment, answering: Model
                          ) -> Answer[tuple[bytes, str]]:
            spoken = await engine.speech({**body, "model": deployment.upstream,
                                          "response_format": body.get("response_format") or "mp3"})
            return Answer(spoken, characters)

        return (await self._stage.call(model, SpeechEngine, Billing(key, "audio"), attempt,
                                       affinity=affinity_key(model, body.get("user"), headers=headers))).value

    async def voices(self, key: KeyRecord, name: str, headers: Headers) -> Any:
        """The speech model's voices, as its engine lists them."""
        model = self._catalogue.resolve(name, key)
        model.require_type(("tts",), "voices")

        async def attempt(engine: SpeechEngine, deployment: Deployment, answering: Model) -> Answer[Any]:
            return Answer(await engine.voices())

        return (await self._stage.call(model, SpeechEngine, Billing(key, "audio"), attempt,
                                       affinity=affinity_key(model, None, headers=headers))).value

    def transcriber(self, name: str, key: KeyRecord) -> Model:
        """The transcription model `name` names (404/403/503 before the upload is read)."""
        model = self._catalogue.resolve(name, key)
        model.require_type(("asr",), "transcriptions")
        return model

    async def transcribe(self, key: KeyRecord, model: Model, path: str, filename: str, fields: dict[str, str],
                         response_format: str, headers: Headers) -> tuple[bytes, str]:
        """The transcript of the audio file at `path` in `response_format` (one of
        TRANSCRIPT_FORMATS), and its media type. `fields` (the form's) go to the engine."""
        await check_duration(path, self._max_duration_s)

        # The upload lies in a file, so every attempt (a failover too) sends it whole again.
        async def attempt(engine: TranscriptionEngine, deployment: Deployment, answering: Model
                          ) -> Answer[dict[str, Any]]:
            result = await engine.transcribe(path, filename, fields)
            return Answer(result, 0, len(result["text"]))

        result = (await self._stage.call(model, TranscriptionEngine, Billing(key, "audio"), attempt,
                                         affinity=affinity_key(model, fields.get("user"), headers=headers))).value
        return render_transcript(result, response_format)

"""The `piper` engine: text to speech in-process with piper-tts (ONNX voices), encoded to the
requested format with PyAV.

The voice's memory grows with the audio of the text it is given at once (about 20 MB a second
of speech, all of it held until the sentence is done), so the text is voiced a piece at a time:
whole sentences up to a length that speaks for about PIECE_SECONDS at the requested speed, a
longer sentence cut at a comma or a space. Each piece is encoded as it comes, so the peak is one
piece's audio plus the encoded output, whatever the length of the text."""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from inferd.config_models import ModelConfig
from inferd.engines.audio_codec import Encoder
from inferd.engines.weights import packaged_path
from inferd.errors import ConfigError, InvalidRequest
from inferd.protocol.audio import MAX_SPEECH_INPUT

if TYPE_CHECKING:
    from inferd.engines.registry import EngineRegistry

OPTION_KEYS = ("voice_path", "voice_name", "builtin_package", "builtin_voice")
PIECE_SECONDS = 15  # of speech per piece; English is spoken at about 16 characters a second
_CHARS_PER_SECOND = 16
_MIN_PIECE, _MAX_PIECE = 60, 600  # characters
_SENTENCE_END = re.compile(r"(?<=[.!?;:\u2026\u3002])\s+|\n\s*\n")


def piece_chars(speed: float) -> int:
    """The longest piece voiced at once at `speed` (slower speech: more audio per character)."""
    return max(_MIN_PIECE, min(_MAX_PIECE, int(PIECE_SECONDS * _CHARS_PER_SECOND * speed)))


def _cut(sentence: str, limit: int) -> Iterator[str]:
    """A sentence in parts of at most `limit` characters: at the last comma in the second half of
    the limit, else at the last space, else (one long word) at the limit."""
    while len(sentence) > limit:
        comma = sentence.rfind(",", limit // 2, limit)
        space = sentence.rfind(" ", 1, limit)
        if comma > 0:
            head, sentence = sentence[:comma + 1], sentence[comma + 1:]
        elif space > 0:
            head, sentence = sentence[:space], sentence[space + 1:]
        else:
            head, sentence = sentence[:limit], sentence[limit:]
        yield head
        sentence = sentence.lstrip()
    yield sentence


def pieces(text: str, limit: int) -> Iterator[str]:
    """`text` as pieces of at most `limit` characters: consecutive whole sentences while they fit,
    a longer sentence in parts (see _cut); blank pieces are dropped."""
    current = ""
    for sentence in _SENTENCE_END.split(text):
        for part in _cut(sentence.strip(), limit):
            if current and len(current) + 1 + len(part) > limit:
                yield current
                current = ""
            current = f"{current} {part}" if current else part
    if current.strip():
        yield current


def _voice_file(model: ModelConfig) -> Path:
    package = model.options.get("builtin_package")
    if package:
        path = packaged_path(model.id, str(package), f"data/{model.options['builtin_voice']}")
    else:
        path = Path(str(model.options.get("voice_path") or "")).expanduser()
    if not path.is_file() or not path.with_name(path.name + ".json").is_file():
        raise ConfigError(f"model {model.id!r}: engine 'piper' needs voice_path: a voice .onnx with its .onnx.json")
    return path


class PiperEngine:
    """One piper voice; synthesis runs on a thread of its own."""

    base_parameters: tuple[str, ...] = ()

    def __init__(self, model: ModelConfig) -> None:
        from piper import PiperVoice  # imported here: only deployments that use it pay for it

        path = _voice_file(model)
        self._voice = PiperVoice.load(str(path))
        card = json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))
        self._name = str(model.options.get("voice_name") or card.get("dataset") or path.stem)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"piper-{model.id}")

    async def voices(self) -> list[str]:
        """The voice ids this engine speaks with."""
        return [self._name]

    def _synthesize(self, text: str, speed: float, audio_format: str) -> tuple[bytes, str]:
        from piper import SynthesisConfig

        config = SynthesisConfig(length_scale=1.0 / speed)
        encoder = Encoder(self._voice.config.sample_rate, audio_format)
        try:
            for piece in pieces(text, piece_chars(speed)):
                for chunk in self._voice.synthesize(piece, syn_config=config):  # a sentence at a time
                    encoder.write(chunk.audio_int16_bytes)
            return encoder.finish(), encoder.content_type
        finally:
            encoder.close()

    async def speech(self, payload: dict[str, Any]) -> tuple[bytes, str]:
        """(audio bytes, Content-Type) for `input` spoken by `voice`."""
        text = payload.get("input")
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest("input: required non-empty string", param="input")
        if len(text) > MAX_SPEECH_INPUT:
            raise InvalidRequest(f"input: at most {MAX_SPEECH_INPUT} characters", param="input")
        voice = payload.get("voice")
        if voice != self._name:
            raise InvalidRequest(f"voice: unknown voice {voice!r}; this model speaks with: {self._name}",
                                 param="voice")
        audio_format = payload.get("response_format") or "mp3"
        speed = float(payload.get("speed") or 1.0)
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self._synthesize, text, speed, audio_format)

    async def close(self) -> None:
        """Stop the synthesis thread."""
        self._executor.shutdown(wait=True)


def register(registry: "EngineRegistry") -> None:
    """Add the `piper` engine to a registry."""
    from inferd.engines.registry import EngineSpec

    registry.register(EngineSpec("piper", PiperEngine, option_keys=OPTION_KEYS))


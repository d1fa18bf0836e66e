"""The `piper` engine: text to speech in-process with piper-tts (ONNX voices), encoded to the
requested format with PyAV."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.config import ModelConfig
from inferd.engines.audio_codec import encode
from inferd.engines.weights import packaged_path
from inferd.errors import ConfigError, InvalidRequest

if TYPE_CHECKING:
    from inferd.engines.registry import EngineRegistry

OPTION_KEYS = ("voice_path", "voice_name", "builtin_package", "builtin_voice")


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

        chunks = list(self._voice.synthesize(text, syn_config=SynthesisConfig(length_scale=1.0 / speed)))
        pcm = b"".join(c.audio_int16_bytes for c in chunks)
        rate = chunks[0].sample_rate if chunks else self._voice.config.sample_rate
        return encode(pcm, rate, audio_format)

    async def speech(self, payload: dict[str, Any]) -> tuple[bytes, str]:
        """(audio bytes, Content-Type) for `input` spoken by `voice`."""
        text = payload.get("input")
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest("input: required non-empty string", param="input")
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


"""The `whisper` engine: speech to text in-process with faster-whisper (CTranslate2), any audio
FFmpeg reads (PyAV decodes it)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.config_models import ModelConfig
from inferd.engines.weights import packaged_path
from inferd.errors import ConfigError, InvalidRequest

if TYPE_CHECKING:
    from inferd.engines.registry import EngineRegistry

OPTION_KEYS = ("model_path", "builtin_package", "compute_type", "n_threads")


def _model_dir(model: ModelConfig) -> Path:
    package = model.options.get("builtin_package")
    if package:
        return packaged_path(model.id, str(package), "model")
    path = Path(str(model.options.get("model_path") or "")).expanduser()
    if not (path / "model.bin").is_file():
        raise ConfigError(f"model {model.id!r}: engine 'whisper' needs model_path (a CTranslate2 Whisper folder)")
    return path


class WhisperEngine:
    """One Whisper model; transcription runs on a thread of its own."""

    base_parameters: tuple[str, ...] = ()

    def __init__(self, model: ModelConfig) -> None:
        from faster_whisper import WhisperModel  # imported here: only deployments that use it pay for it

        self._model = WhisperModel(str(_model_dir(model)), device="cpu",
                                   compute_type=str(model.options.get("compute_type") or "int8"),
                                   cpu_threads=int(model.options.get("n_threads") or 0))
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"whisper-{model.id}")

    def _run(self, path: str, language: str | None, prompt: str | None) -> dict[str, Any]:
        try:
            segments, info = self._model.transcribe(path, language=language, initial_prompt=prompt)
            rows = [{"id": i, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text}
                    for i, s in enumerate(segments)]
        except Exception as exc:  # PyAV raises its own errors on files it cannot decode
            if type(exc).__module__.startswith("av"):
                reason = getattr(exc, "strerror", None) or type(exc).__name__  # str(exc) ends with the temp path
                raise InvalidRequest(f"file: not a readable audio file ({reason})", param="file") from None
            raise
        return {"text": "".join(r["text"] for r in rows).strip(), "language": info.language,
                "duration": round(info.duration, 3), "segments": rows}

    async def transcribe(self, path: str, filename: str, fields: dict[str, str]) -> dict[str, Any]:
        """`{text, language, duration, segments}` for the audio file at `path`."""
        language = fields.get("language") or None
        prompt = fields.get("prompt") or None
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, path, language, prompt)

    async def close(self) -> None:
        """Stop the transcription thread."""
        self._executor.shutdown(wait=True)


def register(registry: "EngineRegistry") -> None:
    """Add the `whisper` engine to a registry."""
    from inferd.engines.registry import EngineSpec

    registry.register(EngineSpec("whisper", WhisperEngine, option_keys=OPTION_KEYS))

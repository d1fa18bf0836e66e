"""The `diffusers` engine: text to image in-process with Hugging Face diffusers, for GPU hosts.

It loads a local pipeline folder named by `model_path` (what `pipeline.save_pretrained()` writes:
`model_index.json` and one folder per component), never a hub id: nothing is fetched at run
time. torch and diffusers are imported only when such a model is configured, so deployments
without one never pay for them. Generation runs on one thread per model: a GPU runs one
pipeline call at a time anyway, and the event loop stays free while it does.
"""

from __future__ import annotations

import asyncio
import base64
import io
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.config_models import ModelConfig
from inferd.errors import ConfigError, EngineError, InvalidRequest
from inferd.protocol.images import MAX_IMAGES, MAX_SIDE, MAX_STEPS_IN_PROCESS

if TYPE_CHECKING:
    from inferd.engines.registry import EngineRegistry

OPTION_KEYS = ("model_path", "device", "dtype", "default_steps", "default_guidance_scale")
_DTYPES = ("float32", "float16", "bfloat16")
# The spec's defaults for omitted fields (ImageGenerationRequest).
_DEFAULT_STEPS = 50
_DEFAULT_GUIDANCE = 4.0


def _pipeline_dir(model: ModelConfig) -> Path:
    path = Path(str(model.options.get("model_path") or "")).expanduser()
    if not (path / "model_index.json").is_file():
        raise ConfigError(f"model {model.id!r}: engine 'diffusers' needs model_path: a local pipeline folder "
                          "with model_index.json (pipeline.save_pretrained output)")
    return path


def _png_b64(image: Any) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def check_bounds(payload: dict[str, Any]) -> None:
    """400 past the work one request may ask of the device: the route checks the same before the
    limits, and this keeps the engine safe from any other caller."""
    width, height = (int(v) for v in str(payload["size"]).split("x"))
    steps = payload.get("num_inference_steps")
    if max(width, height) > MAX_SIDE:
        raise InvalidRequest(f"size: at most {MAX_SIDE}x{MAX_SIDE}", param="size")
    if not 1 <= int(payload.get("n") or 1) <= MAX_IMAGES:
        raise InvalidRequest(f"n: must be an integer from 1 to {MAX_IMAGES}", param="n")
    if steps is not None and not 1 <= int(steps) <= MAX_STEPS_IN_PROCESS:
        raise InvalidRequest(f"num_inference_steps: must be from 1 to {MAX_STEPS_IN_PROCESS}",
                             param="num_inference_steps")


class DiffusersEngine:
    """One diffusers pipeline on one device."""

    base_parameters: tuple[str, ...] = ()

    def __init__(self, model: ModelConfig) -> None:
        folder = _pipeline_dir(model)
        dtype_name = str(model.options.get("dtype") or "float32")
        if dtype_name not in _DTYPES:
            raise ConfigError(f"model {model.id!r}: dtype must be one of {', '.join(_DTYPES)}")
        try:
            import torch
            from diffusers import DiffusionPipeline
        except ImportError as exc:
            raise ConfigError(f"model {model.id!r}: engine 'diffusers' needs torch and diffusers installed "
                              f"({exc.name} is missing)") from None
        self._torch = torch
        self._device = str(model.options.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))
        try:
            pipeline = DiffusionPipeline.from_pretrained(str(folder), dtype=getattr(torch, dtype_name),
                                                         local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model {model.id!r}: cannot load the pipeline in {folder}: {exc}") from None
        self._pipeline = pipeline.to(self._device)
        self._pipeline.set_progress_bar_config(disable=True)
        self._steps = int(model.options.get("default_steps") or _DEFAULT_STEPS)
        self._guidance = float(model.options.get("default_guidance_scale") or _DEFAULT_GUIDANCE)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"diffusers-{model.id}")

    def _generate(self, payload: dict[str, Any]) -> list[str]:
        width, height = (int(v) for v in str(payload["size"]).split("x"))
        seed = payload.get("seed")
        generator = None
        if seed is not None:
            generator = self._torch.Generator(device=self._device).manual_seed(int(seed))
        with self._torch.inference_mode():
            result = self._pipeline(
                prompt=payload["prompt"], negative_prompt=payload.get("negative_prompt"),
                width=width, height=height, num_images_per_prompt=int(payload.get("n") or 1),
                num_inference_steps=int(payload.get("num_inference_steps") or self._steps),
                guidance_scale=float(payload.get("guidance_scale") if payload.get("guidance_scale") is not None
                                     else self._guidance),
                generator=generator, output_type="pil")
        return [_png_b64(image) for image in result.images]

    async def images(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`{created, data: [{b64_json}]}`: PNGs of the requested size, generated on the device."""
        check_bounds(payload)
        try:
            images = await asyncio.get_running_loop().run_in_executor(self._executor, self._generate, payload)
        except ValueError as exc:  # the pipeline's own input checks (a size its VAE cannot produce, …)
            raise InvalidRequest(f"image request rejected by the model: {exc}") from None
        except Exception as exc:  # device errors (out of memory, …) and anything else the model raises
            # The exception's text may name files and devices: the log keeps it, the client gets its kind.
            raise EngineError.concealing(f"image generation failed ({type(exc).__name__})", exc) from None
        return {"created": int(time.time()), "data": [{"b64_json": b64} for b64 in images]}

    async def close(self) -> None:
        """Stop the generation thread and free device memory."""
        self._executor.shutdown(wait=True)
        del self._pipeline
        if self._device.startswith("cuda"):
            self._torch.cuda.empty_cache()


def register(registry: "EngineRegistry") -> None:
    """Add the `diffusers` engine to a registry."""
    from inferd.engines.registry import EngineSpec

    registry.register(EngineSpec("diffusers", DiffusersEngine, option_keys=OPTION_KEYS))

"""The in-process `diffusers` engine: a tiny random-weight Stable Diffusion pipeline built here from
configs (nothing downloaded), served by `inferd serve`, called through the openai SDK."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pytest

from tests.harness import Backend, Server, auth

TOML = """
[[models]]
id = "tiny-sd"
type = "image-gen"
engine = "diffusers"
model_path = "{path}"
device = "cpu"
default_steps = 2
aliases = ["t2i"]
cost = {{ input_per_m_token = 0.0, output_per_m_token = 0.0, image_per_generation = 0.01 }}

[[models]]
id = "remote-sd"
type = "image-gen"
base_url = "http://127.0.0.1:9/v1"
fallbacks = ["tiny-sd"]
"""


def _clip_tokenizer_files(folder: Path) -> None:
    """A character-level CLIP BPE vocabulary (no merges): every text tokenizes, nothing is fetched."""
    # GPT-2/CLIP byte-level alphabet: printable bytes stand for themselves, the rest map above 255.
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = [chr(b) for b in printable] + [chr(256 + i) for i in range(256 - len(printable))]
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    folder.mkdir(parents=True)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")


def build_tiny_pipeline(folder: Path) -> None:
    """Save a Stable Diffusion pipeline with a few thousand random weights to `folder`."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(block_out_channels=(4, 8), layers_per_block=1, sample_size=8, in_channels=4,
                                out_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=8,
                                norm_num_groups=2, attention_head_dim=2)
    vae = AutoencoderKL(block_out_channels=(4,), in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",),
                        norm_num_groups=2)
    _clip_tokenizer_files(folder / "_tokenizer")
    tokenizer = CLIPTokenizer(str(folder / "_tokenizer" / "vocab.json"), str(folder / "_tokenizer" / "merges.txt"),
                              model_max_length=77)
    text_encoder = CLIPTextModel(CLIPTextConfig(hidden_size=8, intermediate_size=16, num_attention_heads=2,
                                                num_hidden_layers=1, vocab_size=len(tokenizer),
                                                max_position_embeddings=77, bos_token_id=tokenizer.bos_token_id,
                                                eos_token_id=tokenizer.eos_token_id))
    pipeline = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                       scheduler=DDIMScheduler(steps_offset=1, clip_sample=False), safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
    pipeline.save_pretrained(str(folder / "pipeline"))


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (and the PNG signature checked)."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.fixture(scope="module")
def diffusers_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Iterator[Server]:
    """`inferd serve` with the tiny pipeline as its only model."""
    folder = tmp_path_factory.mktemp("tiny-sd")
    build_tiny_pipeline(folder)
    config = folder / "inferd.toml"
    config.write_text(TOML.format(path=folder / "pipeline"), encoding="utf-8")
    srv = Server.start(tmp_path_factory.mktemp("diffusers-data"), backend, config)
    try:
        yield srv
    finally:
        srv.stop()


def test_sdk_gets_valid_pngs_of_the_requested_size(diffusers_server: Server) -> None:
    key = diffusers_server.create_key()
    with openai.OpenAI(base_url=diffusers_server.v1, api_key=key, max_retries=0, timeout=120) as sdk:
        reply = sdk.images.generate(model="t2i", prompt="a red square", size="64x48", n=2)  # type: ignore[arg-type]
    assert len(reply.data or []) == 2
    for item in reply.data or []:
        data = base64.b64decode(item.b64_json or "")
        assert png_size(data) == (64, 48)
        from PIL import Image
        import io

        with Image.open(io.BytesIO(data)) as image:
            image.load()  # decodes the whole image: a truncated or corrupt PNG raises here
            assert image.size == (64, 48) and image.mode == "RGB"
    row = diffusers_server.usage_rows(key)[-1]
    assert row["workspace"] == "images" and row["model"] == "tiny-sd" and row["status_code"] == 200
    assert row["cost_usd"] == pytest.approx(0.02)


def test_same_seed_same_image_and_bad_size_is_a_400(diffusers_server: Server) -> None:
    key = diffusers_server.create_key()
    body = {"model": "tiny-sd", "prompt": "a cat", "size": "32x32", "seed": 7, "num_inference_steps": 2}
    first = httpx.post(diffusers_server.v1 + "/images/generations", headers=auth(key), json=body, timeout=120)
    second = httpx.post(diffusers_server.v1 + "/images/generations", headers=auth(key), json=body, timeout=120)
    assert first.status_code == second.status_code == 200
    assert first.json()["data"][0]["b64_json"] == second.json()["data"][0]["b64_json"]
    other = httpx.post(diffusers_server.v1 + "/images/generations", headers=auth(key),
                       json={**body, "seed": 8}, timeout=120)
    assert other.json()["data"][0]["b64_json"] != first.json()["data"][0]["b64_json"]
    # Stable Diffusion needs sides divisible by 8: the pipeline's own check becomes a 400.
    bad = httpx.post(diffusers_server.v1 + "/images/generations", headers=auth(key),
                     json={**body, "size": "30x30"}, timeout=120)
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"]["type"] == "invalid_request_error"


def test_in_process_bounds_are_checked_before_the_limits(diffusers_server: Server) -> None:
    key = diffusers_server.create_key(rpm=1)
    url = diffusers_server.v1 + "/images/generations"
    body = {"model": "t2i", "prompt": "a cat", "size": "32x32", "num_inference_steps": 2}
    for fields, param in (({"num_inference_steps": 151}, "num_inference_steps"),
                          ({"num_inference_steps": 0}, "num_inference_steps"),
                          ({"size": "4096x4096"}, "size"), ({"n": 11}, "n"),
                          # a model served elsewhere that falls back to this one is bounded the same
                          ({"model": "remote-sd", "num_inference_steps": 151}, "num_inference_steps")):
        refused = httpx.post(url, headers=auth(key), json={**body, **fields}, timeout=120)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert "150" in httpx.post(url, headers=auth(key), json={**body, "num_inference_steps": 1000},
                               timeout=120).json()["error"]["message"]
    assert diffusers_server.usage_rows(key) == []  # nothing generated, nothing billed
    accepted = httpx.post(url, headers=auth(key), json=body, timeout=120)  # the key's one request a minute
    assert accepted.status_code == 200, accepted.text
    assert httpx.post(url, headers=auth(key), json=body, timeout=120).status_code == 429

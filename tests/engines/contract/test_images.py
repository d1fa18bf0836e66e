"""The image generation contract (ImageEngine), run against every engine that serves image-gen models."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from inferd.engines.base import ImageEngine
from inferd.errors import InvalidRequest
from tests.engines.contract.engines import Live, assert_openai_transport_failures, capabilities_of, implemented, \
    live_engine
from tests.engines.test_diffusers import png_size
from tests.harness import Upstream

live = live_engine(ImageEngine)
# Small and few steps: the built-in engine runs a random-weight pipeline on the CPU here.
IMAGES: dict[str, Any] = {"model": "mock", "prompt": "a red square", "size": "32x24", "n": 2,
                          "num_inference_steps": 2}


def test_serves_images_and_only_its_own_capabilities(live: Live[ImageEngine]) -> None:
    assert isinstance(live.engine, ImageEngine)
    assert implemented(live.engine) == capabilities_of(live.name)


def test_images_are_base64_pngs_of_the_requested_size(live: Live[ImageEngine]) -> None:
    body = live.call(lambda e: e.images(IMAGES))
    assert isinstance(body["created"], int) and len(body["data"]) == IMAGES["n"]
    for item in body["data"]:
        assert png_size(base64.b64decode(item["b64_json"], validate=True)) == (32, 24)


# A size the built-in pipeline refuses (Stable Diffusion needs sides divisible by 8); the fake upstream
# draws any size.
@pytest.mark.parametrize("live", ["diffusers"], indirect=True)
def test_a_size_the_model_refuses_raises_invalid_request(live: Live[ImageEngine]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        live.call(lambda e: e.images({**IMAGES, "size": "30x30", "n": 1}))
    assert caught.value.status == 400


def test_openai_transport_failures_raise_engine_errors(upstream: Upstream) -> None:
    assert_openai_transport_failures(upstream, ImageEngine, lambda e: e.images(IMAGES))

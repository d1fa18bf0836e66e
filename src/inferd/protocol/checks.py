"""Checks shared by every hot route's request shape, exactly as the spec's tables say: `model`,
`metadata`, integers; and the schema types of `model` and `metadata` (for /openapi.json), built
from the same limits so the document and the checks cannot drift. The chat request's own checks
are beside its schema in `protocol/chat.py`.

The hot routes parse with orjson and check only what the spec validates; everything else is
forwarded untouched. Every failure is a 400 whose message starts with the field's path.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from inferd.errors import InvalidRequest

MAX_MODEL_LENGTH = 256
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512

# What `check_model` accepts, as the schemas of the request bodies say it.
ModelName = Annotated[str, Field(min_length=1, max_length=MAX_MODEL_LENGTH,
                                 description="A model's id or one of its aliases.")]
# What `check_metadata` accepts (null too, where a schema makes it optional), and the words for it.
Metadata = Annotated[
    dict[Annotated[str, Field(max_length=MAX_METADATA_KEY)], Annotated[str, Field(max_length=MAX_METADATA_VALUE)]],
    Field(max_length=MAX_METADATA_PAIRS)]
METADATA_LIMITS = (f"Up to {MAX_METADATA_PAIRS} pairs; keys up to {MAX_METADATA_KEY} and values up to "
                   f"{MAX_METADATA_VALUE} characters.")


def fail(param: str, problem: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {problem}", param=param)


def is_int(value: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_model(body: dict[str, Any]) -> str:
    """`model`: required string of 1 to 256 characters."""
    model = body.get("model")
    if model is None:
        raise fail("model", "required")
    if not isinstance(model, str) or not model:
        raise fail("model", "must be a non-empty string")
    if len(model) > MAX_MODEL_LENGTH:
        raise fail("model", f"longer than {MAX_MODEL_LENGTH} characters")
    return model


def check_metadata(value: Any, param: str = "metadata") -> dict[str, str] | None:
    """A string-to-string map: at most 16 pairs, keys up to 64 and values up to 512 characters."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fail(param, "must be an object of string values")
    if len(value) > MAX_METADATA_PAIRS:
        raise fail(param, f"at most {MAX_METADATA_PAIRS} pairs")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY:
            raise fail(f"{param}.{key[:20]}…", f"keys are at most {MAX_METADATA_KEY} characters")
        if not isinstance(item, str):
            raise fail(f"{param}.{key}", "values must be strings")
        if len(item) > MAX_METADATA_VALUE:
            raise fail(f"{param}.{key}", f"values are at most {MAX_METADATA_VALUE} characters")
    return value or None

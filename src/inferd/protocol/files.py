"""Wire schemas of /v1/files (no logic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class FileObject(BaseModel):
    """An uploaded or generated file."""

    id: str
    object: Literal["file"] = "file"
    filename: str
    bytes: int
    purpose: str
    status: str
    created_at: int


class FileDeleted(BaseModel):
    """The answer to DELETE /v1/files/{id}."""

    id: str
    object: Literal["file"] = "file"
    deleted: bool

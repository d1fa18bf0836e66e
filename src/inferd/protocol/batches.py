"""Wire schemas of /v1/batches (no logic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class BatchCreateRequest(BaseModel):
    """POST /v1/batches."""

    model_config = ConfigDict(extra="forbid")

    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None


class RequestCounts(BaseModel):
    """Lines per outcome; cancelled and expired lines count in `total` only."""

    total: int
    completed: int
    failed: int


class BatchError(BaseModel):
    """One reason a whole input file was rejected."""

    code: str
    message: str
    line: int | None = None
    param: str | None = None


class BatchErrors(BaseModel):
    """The diagnosis of a rejected input file."""

    object: Literal["list"] = "list"
    data: list[BatchError]


class BatchObject(BaseModel):
    """A batch."""

    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    expires_at: int
    request_counts: RequestCounts
    errors: BatchErrors | None
    metadata: dict[str, str] | None


class BatchList(BaseModel):
    """One page of batches, newest first."""

    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool

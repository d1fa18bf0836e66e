"""Whole-file validation of a batch input file (the worker's first step on a new batch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

MAX_LINES = 10_000
MAX_REPORTED = 50  # errors listed in the batch's `errors`; the rest are summarised by the count
URL = "/v1/chat/completions"


@dataclass
class Validated:
    """The accepted lines (custom_id, body as JSON) or the reasons the file was rejected."""

    lines: list[tuple[str, bytes]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, line: int | None, code: str, message: str, param: str | None = None) -> None:
        """Note one reason (only the first MAX_REPORTED are kept)."""
        if len(self.errors) < MAX_REPORTED:
            self.errors.append({"code": code, "message": message, "line": line, "param": param})

    def diagnosis(self) -> dict[str, Any]:
        """The batch's `errors` object."""
        return {"object": "list", "data": self.errors}


def _check_line(result: Validated, number: int, raw: bytes, seen: set[str]) -> None:
    try:
        request = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        result.fail(number, "invalid_json", f"Line {number} is not valid JSON: {exc}")
        return
    if not isinstance(request, dict):
        result.fail(number, "invalid_request", f"Line {number} must be a JSON object")
        return
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        result.fail(number, "missing_custom_id", f"Line {number}: custom_id must be a non-empty string",
                    "custom_id")
        return
    if custom_id in seen:
        result.fail(number, "duplicate_custom_id", f"Line {number}: custom_id '{custom_id}' appears more than once",
                    "custom_id")
        return
    seen.add(custom_id)
    if request.get("method") != "POST":
        result.fail(number, "invalid_method", f"Line {number}: method must be POST", "method")
        return
    if request.get("url") != URL:
        result.fail(number, "invalid_url", f"Line {number}: url must be {URL}", "url")
        return
    if not isinstance(request.get("body"), dict):
        result.fail(number, "invalid_body", f"Line {number}: body must be a chat-completion request object", "body")
        return
    result.lines.append((custom_id, orjson.dumps(request["body"])))


def validate_file(path: Path) -> Validated:
    """Read and check every line; any failure rejects the whole file."""
    result = Validated()
    seen: set[str] = set()
    count = 0
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        result.fail(None, "file_not_found", "The input file no longer exists")
        return result
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue  # blank lines (a trailing newline) carry no request
            count += 1
            if count > MAX_LINES:
                result.fail(number, "too_many_requests", f"The file holds more than {MAX_LINES} requests")
                break
            _check_line(result, number, raw, seen)
    if count == 0:
        result.fail(None, "empty_file", "The input file holds no requests")
    if result.errors:
        result.lines = []
    return result

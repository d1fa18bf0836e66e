"""Multipart uploads streamed to a temporary file, counted as they arrive: a file over the limit
is refused with 413 at the byte that crosses it, never read whole into memory.

What the client names is cleaned here, once, for every route that takes an upload:
the file name and the field names lose their control characters (C0, DEL
and C1) and the file name is cut to 255 characters, since they may go on into a header (the part
headers of an upstream request, a download's Content-Disposition), a database column or a log
line; field values lose theirs too, but a tab or a line break (a transcription `prompt` may hold
lines) becomes a space, so the words either side stay apart. A field whose name is left empty
is dropped; a file name left empty is the route's default."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from inferd.api.body_limits import too_large
from inferd.errors import InvalidRequest

MAX_FIELD_BYTES = 64 * 1024
MAX_FILENAME_CHARS = 255
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_SPACING = re.compile("\r\n|[\t\n\r]")


def clean_name(name: str) -> str:
    """A client's file or field name without control characters."""
    return _CONTROL.sub("", name)


def clean_filename(name: str) -> str:
    """A client's file name without control characters, at most 255 characters (its extension kept)."""
    name = clean_name(name)
    if len(name) > MAX_FILENAME_CHARS:
        stem, dot, extension = name.rpartition(".")
        if dot and stem and len(extension) <= 16:
            name = stem[:MAX_FILENAME_CHARS - len(extension) - 1] + "." + extension
        else:
            name = name[:MAX_FILENAME_CHARS]
    return name


def clean_value(value: str) -> str:
    """A form field's value without control characters: a tab or a line break is a space."""
    return _CONTROL.sub("", _SPACING.sub(" ", value))


@dataclass
class Upload:
    """The form's text fields and the one file part, on disk."""

    fields: dict[str, str] = field(default_factory=dict)
    path: Path | None = None
    filename: str | None = None
    size: int = 0

    def discard(self) -> None:
        """Delete the temporary file."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


async def read_upload(request: Request, file_field: str, max_bytes: int, label: str,
                      directory: Path | None = None) -> Upload:
    """Parse `multipart/form-data`, spooling the part named `file_field` to a temporary file
    (in `directory` when given, so the caller can rename it into place atomically)."""
    content_type, params = parse_options_header(request.headers.get("content-type", ""))
    boundary = params.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise InvalidRequest("The body must be multipart/form-data", param=file_field)
    upload = Upload()
    handle, name = tempfile.mkstemp(prefix="inferd-upload-", dir=directory)
    upload.path = Path(name)
    out = os.fdopen(handle, "wb")
    state: dict[str, object] = {"headers": {}, "field": b"", "name": None, "value": bytearray()}
    over_limit: list[bool] = []

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state["field"] = bytes(state["field"]) + data[start:end]  # type: ignore[arg-type]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        headers = state["headers"]
        key = bytes(state["field"]).lower()  # type: ignore[arg-type]
        headers[key] = headers.get(key, b"") + data[start:end]  # type: ignore[union-attr,index,operator,attr-defined]

    def on_header_end() -> None:
        state["field"] = b""

    def on_headers_finished() -> None:
        _, disposition = parse_options_header(state["headers"].get(b"content-disposition", b""))  # type: ignore[union-attr,attr-defined]
        state["name"] = clean_name(disposition.get(b"name", b"").decode("utf-8", "replace"))
        filename = disposition.get(b"filename")
        if state["name"] == file_field and filename is not None:
            upload.filename = clean_filename(filename.decode("utf-8", "replace"))

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if state["name"] == file_field and upload.filename is not None:
            upload.size += end - start
            if upload.size > max_bytes:
                over_limit.append(True)
                return
            out.write(data[start:end])
        else:
            value = state["value"]
            value.extend(data[start:end])  # type: ignore[attr-defined]
            if len(value) > MAX_FIELD_BYTES:  # type: ignore[arg-type]
                raise InvalidRequest(f"{state['name']}: form field too large", param=str(state["name"]))

    def on_part_end() -> None:
        name = str(state["name"])
        if name and not (name == file_field and upload.filename is not None):
            upload.fields[name] = clean_value(bytes(state["value"]).decode("utf-8", "replace"))  # type: ignore[arg-type]
        state.update(headers={}, field=b"", name=None, value=bytearray())

    parser = MultipartParser(boundary, {
        "on_header_field": on_header_field, "on_header_value": on_header_value, "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished, "on_part_data": on_part_data, "on_part_end": on_part_end})
    try:
        async for chunk in request.stream():
            parser.write(chunk)
            if over_limit:
                raise too_large(max_bytes, label)
        parser.finalize()
        out.close()
    except MultipartParseError as exc:
        out.close()
        upload.discard()
        raise InvalidRequest(f"Malformed multipart body: {exc}", param=file_field) from None
    except BaseException:
        out.close()
        upload.discard()
        raise
    if upload.filename is None:
        upload.discard()
        raise InvalidRequest(f"{file_field}: required file part", param=file_field)
    return upload

"""The server's log lines on stderr.

`text` (the default) keeps the server quiet per request, as before, and prefixes every warning and
error with its time, level, logger and request id. `json` writes one object per request (the
access log) and every warning as an object too, so a log pipeline parses the whole stream. The
access log never holds a secret, a prompt or a reply: only the fields below.

A record cannot forge another: in `text`, control characters of the message (a percent-decoded
request path, an upstream's error body) are escaped (`\\n`, `\\x1b`) and a traceback's lines are
indented under their record, so every line at the left margin starts with a record's time; `json`
escapes them as JSON does, and the line and paragraph separators (U+2028, U+2029) too, which JSON
may hold raw but which str.splitlines() and JavaScript break lines at.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from datetime import datetime, timezone

import orjson

from inferd.observe.requests import RequestNote, current


class _RequestIdFilter(logging.Filter):
    """Adds the request id of the request being served (or "-") to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        note = current.get()
        record.request_id = note.request_id if note is not None else "-"
        return True


# C0, DEL, C1, and the two separators that str.splitlines() also breaks lines at.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escape_controls(text: str) -> str:
    """`text` with its control characters (and line separators) written as escapes: one line."""
    return _UNSAFE.sub(_escaped, text)


class _TextFormatter(logging.Formatter):
    """`time level logger [request id] message`, the message on one line; a traceback or stack
    follows on lines of its own, each indented and escaped."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        blocks = []
        if record.exc_info:
            blocks.append(self.formatException(record.exc_info))
        if record.stack_info:
            blocks.append(self.formatStack(record.stack_info))
        for block in blocks:
            line += "".join(f"\n    {escape_controls(part)}" for part in block.split("\n"))
        return line


def _json(entry: dict[str, object], option: int = 0) -> bytes:
    """One JSON line: orjson's, with U+2028 and U+2029 escaped as well."""
    line = orjson.dumps(entry, option=option)
    if b"\xe2\x80" in line:  # the first two bytes of both separators in UTF-8
        line = line.replace("\u2028".encode(), b"\\u2028").replace("\u2029".encode(), b"\\u2029")
    return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": _iso(record.created), "level": record.levelname.lower(), "logger": record.name,
                 "request_id": getattr(record, "request_id", "-"), "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _json(entry).decode()


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def startup_line(message: str, log_format: str) -> str:
    """A line the command prints on stderr before the server starts: as it is in `text`, or as an
    object shaped like the warnings' in `json`, so that the whole stream stays parseable."""
    if log_format != "json":
        return message
    return _json({"ts": _iso(time.time()), "level": "info", "logger": "inferd", "request_id": "-",
                  "message": message}).decode()


def configure_logging(log_format: str) -> None:
    """Route the `inferd` loggers to stderr in `log_format` (idempotent: one handler), and uvicorn's
    own (a request it could not parse, an exception that left the application) through the same
    handler, so that their lines are escaped too and a `json` stream stays objects only."""
    handler = logging.StreamHandler(sys.stderr)
    handler._inferd = True  # type: ignore[attr-defined]
    handler.addFilter(_RequestIdFilter())
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    for name in ("inferd", "uvicorn"):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            if getattr(old, "_inferd", False) or name == "uvicorn":
                logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False
    logger = logging.getLogger("inferd")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)  # as before: warnings and errors, no chatter per request


class AccessLog:
    """One JSON object per request on stderr, written with one `write(2)` so that the lines of
    several workers never interleave."""

    def __init__(self, fd: int = 2) -> None:
        self._fd = fd

    def write(self, method: str, route: str, note: RequestNote, now: float) -> None:
        """The line of a finished request (`now`: perf_counter at its end)."""
        line = _json({
            "ts": _iso(time.time()), "request_id": note.request_id, "method": method, "route": route,
            "status": note.status, "duration_ms": round((now - note.started) * 1000, 3), "key_id": note.key_id,
            "org": note.org, "model": note.model or None, "deployment": note.deployment,
            "prompt_tokens": note.prompt_tokens, "completion_tokens": note.completion_tokens,
        }, orjson.OPT_APPEND_NEWLINE)
        try:
            os.write(self._fd, line)
        except OSError:  # stderr closed or full: the request itself must not fail for its log line
            pass

"""The server's log lines on stderr (CONTRACT.md decision 18).

`text` (the default) keeps the server quiet per request, as before, and prefixes every warning and
error with its time, level, logger and request id. `json` writes one object per request (the
access log) and every warning as an object too, so a log pipeline parses the whole stream. The
access log never holds a secret, a prompt or a reply: only the fields below.
"""

from __future__ import annotations

import logging
import os
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


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": _iso(record.created), "level": record.levelname.lower(), "logger": record.name,
                 "request_id": getattr(record, "request_id", "-"), "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def startup_line(message: str, log_format: str) -> str:
    """A line the command prints on stderr before the server starts: as it is in `text`, or as an
    object shaped like the warnings' in `json`, so that the whole stream stays parseable."""
    if log_format != "json":
        return message
    return orjson.dumps({"ts": _iso(time.time()), "level": "info", "logger": "inferd", "request_id": "-",
                         "message": message}).decode()


def configure_logging(log_format: str) -> None:
    """Route the `inferd` loggers to stderr in `log_format` (idempotent: one handler)."""
    logger = logging.getLogger("inferd")
    for handler in list(logger.handlers):
        if getattr(handler, "_inferd", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._inferd = True  # type: ignore[attr-defined]
    handler.addFilter(_RequestIdFilter())
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)  # as before: warnings and errors, no chatter per request
    logger.propagate = False


class AccessLog:
    """One JSON object per request on stderr, written with one `write(2)` so that the lines of
    several workers never interleave."""

    def __init__(self, fd: int = 2) -> None:
        self._fd = fd

    def write(self, method: str, route: str, note: RequestNote, now: float) -> None:
        """The line of a finished request (`now`: perf_counter at its end)."""
        line = orjson.dumps({
            "ts": _iso(time.time()), "request_id": note.request_id, "method": method, "route": route,
            "status": note.status, "duration_ms": round((now - note.started) * 1000, 3), "key_id": note.key_id,
            "org": note.org, "model": note.model or None, "deployment": note.deployment,
            "prompt_tokens": note.prompt_tokens, "completion_tokens": note.completion_tokens,
        }, option=orjson.OPT_APPEND_NEWLINE)
        try:
            os.write(self._fd, line)
        except OSError:  # stderr closed or full: the request itself must not fail for its log line
            pass

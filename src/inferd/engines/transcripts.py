"""Transcripts in the plain formats (`text`, `srt`, `vtt`), written the way the OpenAI API writes
them: `text` ends with a newline, and every subtitle cue ends with a blank line.

An engine that answers a plain format itself (an HTTP upstream asked for it) hands the route its
bytes under `body`, and those go to the client unchanged; an engine that only gives segments gets
them written here. Either way the route never re-encodes or trims what the engine wrote."""

from __future__ import annotations

import re
from typing import Any

# format -> the Content-Type the route answers with
PLAIN_FORMATS: dict[str, str] = {"text": "text/plain; charset=utf-8", "srt": "text/plain; charset=utf-8",
                                 "vtt": "text/vtt; charset=utf-8"}
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def _timestamp(seconds: float, separator: str) -> str:
    millis = int(round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def render(result: dict[str, Any], response_format: str) -> bytes:
    """`{text, segments}` written as `text`, `srt` or `vtt`."""
    segments = result.get("segments") or []
    if response_format == "text":
        return (str(result["text"]) + "\n").encode("utf-8")
    if response_format == "srt":
        cues = [f"{i + 1}\n{_timestamp(s['start'], ',')} --> {_timestamp(s['end'], ',')}\n{s['text'].strip()}\n\n"
                for i, s in enumerate(segments)]
        return "".join(cues).encode("utf-8")
    cues = [f"{_timestamp(s['start'], '.')} --> {_timestamp(s['end'], '.')}\n{s['text'].strip()}\n\n"
            for s in segments]
    return ("WEBVTT\n\n" + "".join(cues)).encode("utf-8")


def spoken_text(body: bytes, response_format: str) -> str:
    """The words of a plain-format transcript, without cue numbers, timings or headers: what a
    transcription is billed on (its characters), whichever format the client asked for."""
    text = body.decode("utf-8", "replace").replace("\r\n", "\n")
    if response_format == "text":
        return text.strip()
    words: list[str] = []
    for block in _BLANK_LINE.split(text):
        lines = block.strip().split("\n")
        timing = next((i for i, line in enumerate(lines) if "-->" in line), None)
        if timing is not None:  # the WEBVTT header and NOTE/STYLE blocks carry no timing line
            words.extend(line.strip() for line in lines[timing + 1:] if line.strip())
    return " ".join(words)

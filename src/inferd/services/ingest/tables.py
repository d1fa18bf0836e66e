"""What every reader of extract.py and office.py shares: the text limit, Markdown table rows and
the normalisation of what they read."""

from __future__ import annotations

import re

MAX_CHARS = 1_000_000  # a reader stops once it holds more than this many characters


def pipe_rows(rows: list[list[str]]) -> str:
    """Table rows as `| a | b |` lines (cells flattened to one line, no pipes inside); a table of
    one column is layout, not data, and comes out as paragraphs."""
    cleaned = [[" ".join(cell.replace("|", " ").split()) for cell in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]  # spacer rows say nothing
    if all(len(row) <= 1 for row in cleaned):
        return "\n\n".join(row[0] for row in cleaned if row)
    return "\n".join("| " + " | ".join(row) + " |" for row in cleaned)


_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*(?:\n\s*)+")


def normalise(text: str) -> str:
    """Line ends unified, runs of spaces and of blank lines collapsed, NUL characters dropped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _SPACES.sub(" ", text)
    text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()

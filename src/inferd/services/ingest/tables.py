"""What every reader of extract.py and office.py shares: the text limit and Markdown table rows."""

from __future__ import annotations

MAX_CHARS = 1_000_000  # a reader stops once it holds more than this many characters


def pipe_rows(rows: list[list[str]]) -> str:
    """Table rows as `| a | b |` lines (cells flattened to one line, no pipes inside); a table of
    one column is layout, not data, and comes out as paragraphs."""
    cleaned = [[" ".join(cell.replace("|", " ").split()) for cell in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]  # spacer rows say nothing
    if all(len(row) <= 1 for row in cleaned):
        return "\n\n".join(row[0] for row in cleaned if row)
    return "\n".join("| " + " | ".join(row) + " |" for row in cleaned)

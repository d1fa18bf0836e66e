"""The readable sources of the eval's documents: a small Markdown subset, parsed into blocks that
every writer (build.py, office_writers.py) turns into its own format, and the one date that every
built file carries, so a rebuild gives the same bytes."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

FIXED_DATE = datetime.datetime(2026, 1, 5, 9, 0, tzinfo=datetime.timezone.utc)


@dataclass
class Block:
    """One block of a source: kind is h1, h2, h3, p, ul or table."""

    kind: str
    text: str = ""
    items: list[str] = field(default_factory=list)  # bullets
    rows: list[list[str]] = field(default_factory=list)  # table rows, the header first


def parse(source: str) -> list[Block]:
    """The blocks of a source in the Markdown subset (one blank line between blocks)."""
    blocks = []
    for chunk in source.strip().split("\n\n"):
        lines = chunk.strip().splitlines()
        if lines[0].startswith("#"):
            marks, _, text = lines[0].partition(" ")
            blocks.append(Block(f"h{len(marks)}", text))
        elif lines[0].startswith("|"):
            rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
            blocks.append(Block("table", rows=[rows[0], *rows[2:]]))  # rows[1] is the |---| rule
        elif lines[0].startswith("- "):
            blocks.append(Block("ul", items=[line[2:] for line in lines]))
        else:
            blocks.append(Block("p", " ".join(lines)))
    return blocks

"""Text out of an uploaded file, by extension. Runs on a worker thread (it is CPU work); PDFs and
office documents are read in a child process with a time limit and a memory ceiling (isolated.py).

Structure is kept as light Markdown, so that the chunker (chunk.py) can follow it: headings become
`#` lines, table rows `| a | b |` lines (also the column-aligned tables of plain-text files), HTML
list items `- ` lines.

Every reader stops once it holds more than MAX_CHARS characters, so a large file costs no more
than its first million characters. OOXML and ODF files (zip archives) are read by office.py.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable

from inferd.errors import InvalidRequest, UnreadableFile
from inferd.services.ingest.isolated import EXTRACT_TIMEOUT_S, ISOLATED_EXTENSIONS, read_isolated
from inferd.services.ingest.tables import MAX_CHARS, normalise, pipe_rows

TEXT_EXTENSIONS = frozenset({"txt", "md", "markdown", "log", "json", "jsonl", "ndjson", "geojson", "xml", "yaml",
                             "yml", "sql", "py", "js", "ts", "r", "dat"})
HTML_EXTENSIONS = frozenset({"html", "htm", "xhtml"})
EXTENSIONS = TEXT_EXTENSIONS | HTML_EXTENSIONS | {"pdf", "docx", "pptx", "odt", "odp", "rtf"}

_MAX_TEXT_BYTES = 4 * MAX_CHARS + 4  # UTF-8 needs at most 4 bytes a character
_READ_PIECE = 1 << 16


@dataclass(frozen=True)
class Extracted:
    """A file's text (at most MAX_CHARS characters) and whether it was cut there."""

    text: str
    truncated: bool


def extension_of(filename: str) -> str:
    """The lower-case extension of an upload's file name ('' when it has none)."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


def check_extension(filename: str) -> str:
    """The extension, when it is one we extract; 400 otherwise (legacy .doc named as such)."""
    extension = extension_of(filename)
    if extension == "doc":
        raise InvalidRequest("Legacy .doc files cannot be read: save the document as .docx",
                             code="unsupported_file_type", param="file")
    if extension not in EXTENSIONS:
        shown = f".{extension}" if extension else "without an extension"
        raise InvalidRequest(f"Files {shown} cannot be vectorized (accepted: {', '.join(sorted(EXTENSIONS))})",
                             code="unsupported_file_type", param="file")
    return extension


# --- plain text and HTML -------------------------------------------------------------------

def decode_text(data: bytes, cut: bool) -> str:
    """Bytes to text: BOMs honoured, UTF-8 preferred, cp1252 for legacy files; NUL bytes mean binary."""
    for bom, encoding in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                          (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    if b"\x00" in data[:8192]:
        raise InvalidRequest("The file is binary, not text: no readable content", code="no_readable_content",
                             param="file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(data) - 3:  # a character split by our own read limit
            return data[:exc.start].decode("utf-8")
        return data.decode("cp1252", errors="replace")


def _read_prefix(path: Path, limit: int) -> tuple[bytes, bool]:
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    return data[:limit], len(data) > limit


def _plain_text(path: Path) -> str:
    data, cut = _read_prefix(path, _MAX_TEXT_BYTES)
    return decode_text(data, cut)


# A cell of a column-aligned plain-text table: text between tabs or runs of two or more spaces.
_ALIGNED_CELL = re.compile(r"[^\t ]+(?: [^\t ]+)*")
_RULE_CELL = re.compile(r"[-=+:]+")


def _aligned(above: list[re.Match[str]], below: list[re.Match[str]], tabs: bool) -> bool:
    """Whether two lines' cells are one table's rows: as many cells, and (unless tabs separate
    them) every column after the first starting or ending at the same place in both lines, which
    prose with a double space after a full stop does not do."""
    if len(above) != len(below):
        return False
    return tabs or all(a.start() == b.start() or a.end() == b.end() for a, b in zip(above[1:], below[1:]))


def aligned_tables(text: str) -> str:
    """Plain text with its column-aligned tables (two or more consecutive lines of the same two or
    more columns, cut at tabs or runs of 2+ spaces) as pipe rows; rule lines (`----  ---`) become
    Markdown separator rows. Runs before normalise() collapses the spaces that align them."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    # Only a line with a tab or an inner double space can have two cells (most lines have neither).
    cells = [list(_ALIGNED_CELL.finditer(line)) if "\t" in line or "  " in line.strip() else []
             for line in lines]
    out: list[str] = []
    index = 0
    while index < len(lines):
        run_end = index + 1
        if len(cells[index]) >= 2:
            while run_end < len(lines) and _aligned(cells[run_end - 1], cells[run_end],
                                                    "\t" in lines[run_end - 1] or "\t" in lines[run_end]):
                run_end += 1
        if run_end - index < 2:
            out.append(lines[index])
            index += 1
            continue
        rows = []
        for matches in cells[index:run_end]:
            row = [match.group() for match in matches]
            rows.append(["---"] * len(row) if all(_RULE_CELL.fullmatch(cell) for cell in row) else row)
        out.extend(("", pipe_rows(rows), ""))
        index = run_end
    return "\n".join(out)


def _plain_text_tables(path: Path) -> str:
    return aligned_tables(_plain_text(path))


@dataclass
class _HtmlTable:
    """A table being read: its finished rows, and the row and cell open now."""

    rows: list[list[str]] = field(default_factory=list)
    row: list[str] | None = None
    cell: list[str] | None = None

    def close_cell(self) -> None:
        if self.cell is not None:
            if self.row is None:
                self.row = []
            self.row.append("".join(self.cell))
            self.cell = None

    def close_row(self) -> None:
        self.close_cell()
        if self.row is not None:
            self.rows.append(self.row)
            self.row = None


class _HtmlText(HTMLParser):
    """Visible text of an HTML page as light Markdown: blocks on new lines, `#` headings, `- ` list
    items, tables as pipe rows; script, style and similar elements dropped."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    _BLOCKS = frozenset({"p", "div", "br", "li", "tr", "section", "article", "header", "footer", "pre",
                         "blockquote", "table", "ul", "ol", "title", "hr", "dl", "dt", "dd"})
    _HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.size = 0
        self._skipping: list[str] = []
        self._tables: list[_HtmlTable] = []  # open tables, innermost last
        self._heading: tuple[int, list[str]] | None = None  # the open heading's level and text
        self._bullet = False  # a list item began: its "- " goes before its first text

    def _cell(self) -> list[str] | None:
        return self._tables[-1].cell if self._tables else None

    def _break(self) -> None:
        """A block boundary: a new line, or a space inside a table cell or a heading."""
        cell = self._cell()
        if cell is not None:
            cell.append(" ")
        elif self._heading is not None:
            self._heading[1].append(" ")
        else:
            self.parts.append("\n")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping.append(tag)
        elif self._skipping:
            return
        elif tag == "table":
            self._tables.append(_HtmlTable())
        elif tag == "tr" and self._tables:
            self._tables[-1].close_row()
            self._tables[-1].row = []
        elif tag in ("td", "th") and self._tables:
            self._tables[-1].close_cell()
            self._tables[-1].cell = []
        elif tag in self._HEADINGS and self._cell() is None and self._heading is None:
            self._heading = (self._HEADINGS[tag], [])
        elif tag == "li" and self._cell() is None:
            self.parts.append("\n")
            self._bullet = True
        elif tag == "pre" and self._cell() is None and self._heading is None:
            self.parts.append("\n\n```\n")  # fenced, so that a `# comment` in it is not read as a heading
        elif tag in self._BLOCKS:
            self._break()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BLOCKS and not self._skipping:
            self._break()

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            if self._skipping[-1] == tag:
                self._skipping.pop()
        elif tag in ("td", "th") and self._tables:
            self._tables[-1].close_cell()
        elif tag == "tr" and self._tables:
            self._tables[-1].close_row()
        elif tag == "table" and self._tables:
            self._close_table()
        elif tag in self._HEADINGS and self._heading is not None and self._cell() is None:
            self._close_heading()
        elif tag == "li" and self._cell() is None:
            self.parts.append("\n")
            self._bullet = False
        elif tag == "pre" and self._cell() is None and self._heading is None:
            self.parts.append("\n```\n\n")
        elif tag in self._BLOCKS:
            self._break()

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        self.size += len(data)
        cell = self._cell()
        if cell is not None:
            cell.append(data)
        elif self._heading is not None:
            self._heading[1].append(data)
        elif self._bullet and data.strip():
            self.parts.append("- " + data.lstrip())
            self._bullet = False
        else:
            self.parts.append(data)

    def _close_heading(self) -> None:
        assert self._heading is not None
        level, pieces = self._heading
        self._heading = None
        title = " ".join("".join(pieces).split())
        if title:
            self.parts.append(f"\n\n{'#' * level} {title}\n\n")

    def _close_table(self) -> None:
        table = self._tables.pop()
        table.close_row()
        rendered = pipe_rows(table.rows)
        outer = self._cell()
        if outer is not None:  # a table inside a cell is flattened into it
            outer.append(" " + " ".join(rendered.split()) + " ")
        elif self._heading is not None:
            self._heading[1].append(" " + rendered.replace("\n", " ") + " ")
        elif rendered:
            self.parts.append("\n\n" + rendered + "\n\n")

    def finish(self) -> str:
        """The page's text, with what a cut left open (tables, a heading) closed."""
        while self._tables:
            self._close_table()
        if self._heading is not None:
            self._close_heading()
        return "".join(self.parts)


def _html_text(path: Path) -> str:
    data, cut = _read_prefix(path, 8 * _MAX_TEXT_BYTES)  # markup outweighs text
    return html_to_text(decode_text(data, cut))


def html_to_text(text: str) -> str:
    """The visible text of an HTML document as light Markdown (an uploaded file, or a fetched web page)."""
    parser = _HtmlText()
    for start in range(0, len(text), _READ_PIECE):
        parser.feed(text[start:start + _READ_PIECE])
        if parser.size > MAX_CHARS:
            break
    parser.close()
    return parser.finish()


def _rtf_text(path: Path) -> str:
    from striprtf.striprtf import rtf_to_text

    data, _ = _read_prefix(path, 8 * _MAX_TEXT_BYTES)
    raw = data.decode("latin-1")
    if not raw.lstrip().startswith("{\\rtf"):
        raise UnreadableFile("not an RTF document")
    return str(rtf_to_text(raw, errors="replace"))


_READERS: dict[str, Callable[[Path], str]] = {
    **{ext: _plain_text for ext in TEXT_EXTENSIONS},
    "txt": _plain_text_tables, "dat": _plain_text_tables,
    **{ext: _html_text for ext in HTML_EXTENSIONS},
    "rtf": _rtf_text,
}

def extract_text(path: Path, filename: str, timeout_s: float = EXTRACT_TIMEOUT_S) -> Extracted:
    """The text of an upload (400 for a type we do not read, an unreadable file, no text, or a PDF
    or office document that takes longer than `timeout_s` to read)."""
    extension = check_extension(filename)
    if extension in ISOLATED_EXTENSIONS:
        text = read_isolated(extension, path, MAX_CHARS, timeout_s)  # normalised by the child
    else:
        text = normalise(_READERS[extension](path))
    if not text:
        raise InvalidRequest("The file has no readable text content", code="no_readable_content", param="file")
    truncated = len(text) > MAX_CHARS
    return Extracted(text[:MAX_CHARS] if truncated else text, truncated)

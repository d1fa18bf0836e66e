"""Text out of an uploaded file, by extension. Runs on a worker thread (it is CPU work); PDFs are
read in a child process with a time limit (pdf.py).

Every reader stops once it holds more than MAX_CHARS characters, so a large file costs no more
than its first million characters. OOXML and ODF files are zip archives: they are opened only
after their directory passes the limits below, and members are read with bounded reads, so a zip
bomb is refused before anything is inflated.
"""

from __future__ import annotations

import codecs
import re
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable
from xml.etree import ElementTree

from inferd.errors import InvalidRequest, UnreadableFile
from inferd.services.ingest.pdf import PDF_TIMEOUT_S, pdf_text

MAX_CHARS = 1_000_000
TEXT_EXTENSIONS = frozenset({"txt", "md", "markdown", "log", "json", "jsonl", "ndjson", "geojson", "xml", "yaml",
                             "yml", "sql", "py", "js", "ts", "r", "dat"})
HTML_EXTENSIONS = frozenset({"html", "htm", "xhtml"})
EXTENSIONS = TEXT_EXTENSIONS | HTML_EXTENSIONS | {"pdf", "docx", "pptx", "odt", "odp", "rtf"}

# Zip limits: far above any real document, far below what a bomb inflates to.
MAX_ZIP_MEMBERS = 10_000
MAX_ZIP_TOTAL_BYTES = 256 * 1024 * 1024  # declared uncompressed size of all members
MAX_ZIP_MEMBER_BYTES = 64 * 1024 * 1024  # one member we read (document.xml, a slide, content.xml)
MAX_ZIP_RATIO = 100  # uncompressed / compressed, for members over 1 MiB (XML compresses 5-20x)
_RATIO_FLOOR = 1024 * 1024

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


class _HtmlText(HTMLParser):
    """Visible text of an HTML page: script, style and similar elements dropped, blocks on new lines."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    _BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
                         "header", "footer", "pre", "blockquote", "table", "ul", "ol", "title", "hr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.size = 0
        self._skipping: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping.append(tag)
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self._skipping and self._skipping[-1] == tag:
            self._skipping.pop()
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)
            self.size += len(data)


def _html_text(path: Path) -> str:
    data, cut = _read_prefix(path, 8 * _MAX_TEXT_BYTES)  # markup outweighs text
    parser = _HtmlText()
    text = decode_text(data, cut)
    for start in range(0, len(text), _READ_PIECE):
        parser.feed(text[start:start + _READ_PIECE])
        if parser.size > MAX_CHARS:
            break
    parser.close()
    return "".join(parser.parts)


def _rtf_text(path: Path) -> str:
    from striprtf.striprtf import rtf_to_text

    data, _ = _read_prefix(path, 8 * _MAX_TEXT_BYTES)
    raw = data.decode("latin-1")
    if not raw.lstrip().startswith("{\\rtf"):
        raise UnreadableFile("not an RTF document")
    return str(rtf_to_text(raw, errors="replace"))


# --- zip-based documents (OOXML, ODF) ------------------------------------------------------

def open_archive(path: Path) -> zipfile.ZipFile:
    """A zip archive whose directory is within the limits; 400 for anything else (a bomb included)."""
    if not zipfile.is_zipfile(path):
        raise UnreadableFile("not a valid document archive")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnreadableFile(f"broken archive ({exc})") from None
    members = archive.infolist()
    refused = None
    if len(members) > MAX_ZIP_MEMBERS:
        refused = f"{len(members)} members (at most {MAX_ZIP_MEMBERS})"
    elif sum(m.file_size for m in members) > MAX_ZIP_TOTAL_BYTES:
        refused = f"it expands past {MAX_ZIP_TOTAL_BYTES // (1024 * 1024)} MiB"
    else:
        for member in members:
            if member.file_size > _RATIO_FLOOR and member.file_size > MAX_ZIP_RATIO * max(member.compress_size, 1):
                refused = f"member {member.filename!r} is compressed more than {MAX_ZIP_RATIO}:1"
                break
    if refused:
        archive.close()
        raise InvalidRequest(f"The archive was refused: {refused}", code="unsafe_archive", param="file")
    return archive


def _member_xml(archive: zipfile.ZipFile, name: str) -> ElementTree.Element | None:
    try:
        info = archive.getinfo(name)
    except KeyError:
        return None
    if info.file_size > MAX_ZIP_MEMBER_BYTES:
        raise InvalidRequest(f"The archive was refused: member {name!r} is over "
                             f"{MAX_ZIP_MEMBER_BYTES // (1024 * 1024)} MiB", code="unsafe_archive", param="file")
    try:
        with archive.open(info) as member:
            data = member.read(MAX_ZIP_MEMBER_BYTES + 1)  # zipfile stops at the declared size
        if b"<!ENTITY" in data:  # office XML never declares entities; refuse expansion tricks outright
            raise UnreadableFile(f"member {name!r} declares XML entities")
        return ElementTree.fromstring(data)
    except (zipfile.BadZipFile, ElementTree.ParseError, OSError, EOFError, RuntimeError) as exc:
        raise UnreadableFile(f"member {name!r}: {exc}") from None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _ooxml_paragraphs(root: ElementTree.Element, text_tag: str) -> list[str]:
    """Paragraphs (`p`) of a WordprocessingML or DrawingML part: runs' text, tabs and breaks."""
    paragraphs = []
    for element in root.iter():
        if _local(element.tag) != "p":
            continue
        pieces = []
        for node in element.iter():
            name = _local(node.tag)
            if name == text_tag and node.text:
                pieces.append(node.text)
            elif name == "tab":
                pieces.append("\t")
            elif name in ("br", "cr"):
                pieces.append("\n")
        paragraphs.append("".join(pieces))
    return paragraphs


def _docx_text(path: Path) -> str:
    with open_archive(path) as archive:
        root = _member_xml(archive, "word/document.xml")
        if root is None:
            raise UnreadableFile("no word/document.xml in the archive")
        return "\n".join(_ooxml_paragraphs(root, "t"))


def _pptx_text(path: Path) -> str:
    with open_archive(path) as archive:
        slides = sorted((int(m.group(1)), name) for name in archive.namelist()
                        if (m := re.fullmatch(r"ppt/slides/slide(\d+)\.xml", name)))
        if not slides and "ppt/presentation.xml" not in archive.namelist():
            raise UnreadableFile("not a PowerPoint presentation")
        texts, size = [], 0
        for _, name in slides:
            root = _member_xml(archive, name)
            text = "\n".join(_ooxml_paragraphs(root, "t")) if root is not None else ""
            texts.append(text)
            size += len(text)
            if size > MAX_CHARS:
                break
        return "\n\n".join(texts)


def _odf_inline(element: ElementTree.Element) -> str:
    pieces = [element.text or ""]
    for child in element:
        name = _local(child.tag)
        if name == "s":
            pieces.append(" " * int(child.get("{urn:oasis:names:tc:opendocument:xmlns:text:1.0}c", "1") or 1))
        elif name == "tab":
            pieces.append("\t")
        elif name == "line-break":
            pieces.append("\n")
        elif name != "note":
            pieces.append(_odf_inline(child))
        pieces.append(child.tail or "")
    return "".join(pieces)


def _odf_paragraphs(element: ElementTree.Element, out: list[str]) -> None:
    for child in element:
        if _local(child.tag) in ("p", "h"):
            out.append(_odf_inline(child))
        else:
            _odf_paragraphs(child, out)


def _odf_text(path: Path) -> str:
    with open_archive(path) as archive:
        root = _member_xml(archive, "content.xml")
        if root is None:
            raise UnreadableFile("no content.xml in the archive")
        paragraphs: list[str] = []
        _odf_paragraphs(root, paragraphs)
        return "\n".join(paragraphs)


_READERS: dict[str, Callable[[Path], str]] = {
    **{ext: _plain_text for ext in TEXT_EXTENSIONS},
    **{ext: _html_text for ext in HTML_EXTENSIONS},
    "rtf": _rtf_text, "docx": _docx_text, "pptx": _pptx_text, "odt": _odf_text, "odp": _odf_text,
}

_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*(?:\n\s*)+")


def normalise(text: str) -> str:
    """Line ends unified, runs of spaces and of blank lines collapsed, NUL characters dropped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _SPACES.sub(" ", text)
    text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()


def extract_text(path: Path, filename: str, pdf_timeout_s: float = PDF_TIMEOUT_S) -> Extracted:
    """The text of an upload (400 for a type we do not read, an unreadable file, no text, or a PDF
    that takes longer than `pdf_timeout_s` to read)."""
    extension = check_extension(filename)
    raw = pdf_text(path, MAX_CHARS, pdf_timeout_s) if extension == "pdf" else _READERS[extension](path)
    text = normalise(raw)
    if not text:
        raise InvalidRequest("The file has no readable text content", code="no_readable_content", param="file")
    truncated = len(text) > MAX_CHARS
    return Extracted(text[:MAX_CHARS] if truncated else text, truncated)

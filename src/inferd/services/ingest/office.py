"""Text out of OOXML (docx, pptx) and ODF (odt, odp) documents, which are zip archives: an archive
is opened only after its directory passes the limits below, and members are read with bounded
reads, so a zip bomb is refused before anything is inflated. Headings become `#` lines and table
rows `| a | b |` lines, as extract.py does for the other formats.

These readers run only in the capped child process of isolated.py: a member within the limits
below can still parse into far more memory than it weighs (64 MiB of empty paragraphs are
millions of elements), and that must end the child, not the server."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Callable
from xml.etree import ElementTree

from inferd.errors import InvalidRequest, UnreadableFile
from inferd.services.ingest.tables import MAX_CHARS, pipe_rows

# Zip limits: far above any real document, far below what a bomb inflates to.
MAX_ZIP_MEMBERS = 10_000
MAX_ZIP_TOTAL_BYTES = 256 * 1024 * 1024  # declared uncompressed size of all members
MAX_ZIP_MEMBER_BYTES = 64 * 1024 * 1024  # one member we read (document.xml, a slide, content.xml)
MAX_ZIP_RATIO = 100  # uncompressed / compressed, for members over 1 MiB (XML compresses 5-20x)
_RATIO_FLOOR = 1024 * 1024


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


def _ooxml_paragraph_text(paragraph: ElementTree.Element, text_tag: str) -> str:
    """A WordprocessingML or DrawingML paragraph's runs: text, tabs and breaks."""
    pieces = []
    for node in paragraph.iter():
        name = _local(node.tag)
        if name == text_tag and node.text:
            pieces.append(node.text)
        elif name == "tab":
            pieces.append("\t")
        elif name in ("br", "cr"):
            pieces.append("\n")
    return "".join(pieces)


def _ooxml_paragraphs(root: ElementTree.Element, text_tag: str) -> list[str]:
    """Paragraphs (`p`) of a WordprocessingML or DrawingML part, in document order."""
    return [_ooxml_paragraph_text(element, text_tag) for element in root.iter() if _local(element.tag) == "p"]


def _child(element: ElementTree.Element, name: str) -> ElementTree.Element | None:
    return next((child for child in element if _local(child.tag) == name), None)


def _attribute(element: ElementTree.Element | None, name: str) -> str:
    """An attribute by local name (WordprocessingML puts them in its own namespace)."""
    if element is None:
        return ""
    return next((value for key, value in element.attrib.items() if _local(key) == name), "")


_HEADING_STYLE = re.compile(r"heading\s*([1-9])", re.IGNORECASE)


def _docx_paragraph(paragraph: ElementTree.Element) -> str:
    """A body paragraph; a heading (style Title or Heading N, or an outline level) as a `#` line,
    a numbered or bulleted paragraph as a `- ` line."""
    text = _ooxml_paragraph_text(paragraph, "t")
    properties = _child(paragraph, "pPr")
    if properties is None:
        return text
    style = _attribute(_child(properties, "pStyle"), "val")
    outline = _attribute(_child(properties, "outlineLvl"), "val")
    level = 0
    if style.lower() == "title":
        level = 1
    elif match := _HEADING_STYLE.fullmatch(style):
        level = int(match.group(1))
    elif outline.isdigit() and int(outline) < 9:  # level 9 is body text
        level = int(outline) + 1
    if level and text.strip():
        return "#" * min(level, 6) + " " + " ".join(text.split())
    if _child(properties, "numPr") is not None and text.strip():
        return "- " + text.strip()
    return text


def _docx_table(table: ElementTree.Element) -> str:
    rows = []
    for row in table:
        if _local(row.tag) != "tr":
            continue
        rows.append([" ".join(_ooxml_paragraph_text(p, "t") for p in cell.iter() if _local(p.tag) == "p")
                     for cell in row if _local(cell.tag) == "tc"])
    return pipe_rows(rows)


def _docx_blocks(container: ElementTree.Element, out: list[str]) -> None:
    """Paragraphs and tables of the body in document order (content controls opened)."""
    for child in container:
        name = _local(child.tag)
        if name == "p":
            out.append(_docx_paragraph(child))
        elif name == "tbl":
            out.append(_docx_table(child))
        elif name in ("sdt", "sdtContent", "customXml", "ins", "smartTag"):
            _docx_blocks(child, out)


def _blocks_text(path: Path, member: str, blocks: Callable[[ElementTree.Element, list[str]], None]) -> str:
    """The blocks that `blocks` collects from one XML member of the archive, a blank line between each."""
    with open_archive(path) as archive:
        root = _member_xml(archive, member)
        if root is None:
            raise UnreadableFile(f"no {member} in the archive")
        out: list[str] = []
        blocks(root, out)
        return "\n\n".join(out)


def _docx_document(root: ElementTree.Element, out: list[str]) -> None:
    """The blocks of the document's body (of the whole document when it has none)."""
    body = _child(root, "body")
    _docx_blocks(body if body is not None else root, out)


def docx_text(path: Path) -> str:
    return _blocks_text(path, "word/document.xml", _docx_document)


def pptx_text(path: Path) -> str:
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


_ODF_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"


def _odf_rows(element: ElementTree.Element, rows: list[list[str]]) -> None:
    for child in element:
        name = _local(child.tag)
        if name == "table-row":
            rows.append([" ".join(_odf_inline(p) for p in cell.iter() if _local(p.tag) in ("p", "h"))
                         for cell in child if _local(cell.tag) in ("table-cell", "covered-table-cell")])
        elif name in ("table-header-rows", "table-rows", "table-row-group"):
            _odf_rows(child, rows)


def _odf_blocks(element: ElementTree.Element, out: list[str]) -> None:
    """Paragraphs, `#` headings (by outline level), `- ` list items and pipe-row tables, in order."""
    for child in element:
        name = _local(child.tag)
        if name == "h":
            text = " ".join(_odf_inline(child).split())
            level = child.get(_ODF_TEXT + "outline-level", "1")
            out.append("#" * min(int(level) if level.isdigit() and level != "0" else 1, 6) + " " + text
                       if text else "")
        elif name == "p":
            out.append(_odf_inline(child))
        elif name == "table":
            rows: list[list[str]] = []
            _odf_rows(child, rows)
            out.append(pipe_rows(rows))
        elif name == "list-item":
            item: list[str] = []
            _odf_blocks(child, item)
            first = next((i for i, text in enumerate(item) if text.strip()), None)
            if first is not None and not item[first].startswith("- "):
                item[first] = "- " + item[first].strip()
            out.extend(item)
        else:
            _odf_blocks(child, out)


def odf_text(path: Path) -> str:
    return _blocks_text(path, "content.xml", _odf_blocks)

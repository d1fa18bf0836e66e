"""Extraction, on files written here (no server needed for these rules): limits, encodings, and the
structure kept as light Markdown (headings, tables, lists). Chunking: test_chunk.py."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from inferd.errors import InvalidRequest
from inferd.services.ingest.extract import MAX_CHARS, aligned_tables, decode_text, extract_text, normalise
from inferd.services.ingest.office import MAX_ZIP_TOTAL_BYTES
from tests.sources import documents


def test_text_past_a_million_characters_is_truncated(tmp_path: Path) -> None:
    path = tmp_path / "long.txt"
    path.write_text("word " * 300_000, encoding="utf-8")  # 1.5 million characters
    extracted = extract_text(path, "long.txt")
    assert extracted.truncated is True and len(extracted.text) == MAX_CHARS
    short = tmp_path / "short.md"
    short.write_text("just a few words", encoding="utf-8")
    assert extract_text(short, "short.md").truncated is False


def test_multibyte_text_truncates_on_characters_not_bytes(tmp_path: Path) -> None:
    path = tmp_path / "greek.txt"
    path.write_text("αβγδε " * 400_000, encoding="utf-8")  # 2.4 M characters, 4.4 MB
    extracted = extract_text(path, "greek.txt")
    assert len(extracted.text) == MAX_CHARS and "\ufffd" not in extracted.text


def test_encodings() -> None:
    assert decode_text("café".encode("utf-16"), cut=False) == "café"
    assert decode_text(b"\xef\xbb\xbfhello", cut=False) == "hello"
    assert decode_text("naïve".encode("cp1252"), cut=False) == "naïve"
    assert decode_text("ok é".encode()[:-1], cut=True) == "ok "  # our own cut splits the last character


def test_archive_limits(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.pptx"
    bomb.write_bytes(documents.zip_bomb("ppt/slides/slide1.xml", inflated_mib=8))
    with pytest.raises(InvalidRequest) as refused:
        extract_text(bomb, "bomb.pptx")
    assert refused.value.code == "unsafe_archive" and "compressed more than" in refused.value.message
    # Declared sizes past the total cap are refused from the directory alone (sizes are patched in
    # the central directory, so nothing that large is ever written or read).
    big = tmp_path / "big.odt"
    with zipfile.ZipFile(big, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("content.xml", "<office:document-content/>")
    data = bytearray(big.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    data[central + 24:central + 28] = (MAX_ZIP_TOTAL_BYTES + 1).to_bytes(4, "little")  # uncompressed size
    big.write_bytes(bytes(data))
    with pytest.raises(InvalidRequest) as too_big:
        extract_text(big, "big.odt")
    assert too_big.value.code == "unsafe_archive" and "expands past" in too_big.value.message


def test_entity_declarations_in_office_xml_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "laughs.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("word/document.xml", '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "ha">]>'
                                              '<w:document xmlns:w="w"><w:p><w:t>&a;</w:t></w:p></w:document>')
    with pytest.raises(InvalidRequest) as refused:
        extract_text(path, "laughs.docx")
    assert refused.value.code == "unreadable_file"


def _extracted(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return extract_text(path, name).text


def test_html_headings_lists_and_tables(tmp_path: Path) -> None:
    page = (b"<!doctype html><html><head><title>Rates</title><script>var t = 'SECRET';</script></head><body>"
            b"<h1>Travel <em>policy</em></h1><p>Intro.</p><h3>Hotels</h3>"
            b"<ul><li>Book early</li><li><p>Keep <b>receipts</b></p></li></ul>"
            b"<table><thead><tr><th>City</th><th>Rate | EUR</th><th>Note</th></tr></thead><tbody>"
            b"<tr><td>Paris</td><td>180<br>per night</td><td></td></tr>"
            b"<tr><td>Lyon<td>140<td>no closing tags</tr></tbody></table>"
            b"<p>After the table.</p><table><tr><td>A layout table of one cell</td></tr></table></body></html>")
    text = _extracted(tmp_path, "rates.html", page)
    assert "SECRET" not in text
    assert text == ("Rates\n\n# Travel policy\n\nIntro.\n\n### Hotels\n\n- Book early\n\n- Keep receipts\n\n"
                    "| City | Rate EUR | Note |\n| Paris | 180 per night | |\n| Lyon | 140 | no closing tags |\n\n"
                    "After the table.\n\nA layout table of one cell")


def test_html_cut_inside_a_table_keeps_its_rows(tmp_path: Path) -> None:
    rows = "".join(f"<tr><td>row {i}</td><td>{i * 3}</td></tr>" for i in range(3))
    text = _extracted(tmp_path, "cut.htm", f"<h2>Open</h2><table><tr><th>A</th><th>B</th></tr>{rows}".encode())
    assert text == "## Open\n\n| A | B |\n| row 0 | 0 |\n| row 1 | 3 |\n| row 2 | 6 |"


def test_docx_headings_and_tables_in_document_order(tmp_path: Path) -> None:
    data = documents.docx_with_structure(
        "Travel policy", [("Scope", ["Applies to all staff."]), ("Rates", ["See the table.", "Reviewed yearly."]),
                          ("Claims", ["Within thirty days."])],
        [["City", "Rate (EUR)"], ["Paris", "180\nper night"], ["Lyon", ""]], table_after=1)
    text = _extracted(tmp_path, "policy.docx", data)
    assert text == ("# Travel policy\n\n# Scope\n\nApplies to all staff.\n\n# Rates\n\nSee the table.\n\n"
                    "Reviewed yearly.\n\n| City | Rate (EUR) |\n| Paris | 180 per night |\n| Lyon | |\n\n"
                    "# Claims\n\nWithin thirty days.")
    assert text.count("Paris") == 1  # a cell's paragraphs are not repeated as paragraphs of the body


def test_docx_heading_styles_by_name(tmp_path: Path) -> None:
    namespace = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"

    def paragraph(text: str, style: str = "", extra: str = "") -> str:
        style_element = f'<w:pStyle w:val="{style}"/>' if style else ""
        properties = f"<w:pPr>{style_element}{extra}</w:pPr>"
        return f"<w:p>{properties}<w:r><w:t>{text}</w:t></w:r></w:p>"

    body = "".join([paragraph("Deep", "heading 3"), paragraph("Outlined", extra='<w:outlineLvl w:val="1"/>'),
                    paragraph("Item", "ListParagraph", '<w:numPr><w:numId w:val="1"/></w:numPr>'),
                    paragraph("Plain", "Normal"), paragraph("Seven", "Heading7")])
    path = tmp_path / "styles.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("word/document.xml", f'<w:document xmlns:w="{namespace}"><w:body>{body}</w:body></w:document>')
    assert extract_text(path, "styles.docx").text == "### Deep\n\n## Outlined\n\n- Item\n\nPlain\n\n###### Seven"


def test_odt_headings_tables_and_lists(tmp_path: Path) -> None:
    data = documents.odt_with_structure("Travel policy", "Rates", "See the table.",
                                        [["City", "Rate"], ["Paris", "180"], ["Lyon", "140"]],
                                        ["Book early", "Keep receipts"])
    text = _extracted(tmp_path, "policy.odt", data)
    assert text == ("# Travel policy\n\n## Rates\n\nSee the table.\n\n| City | Rate |\n| Paris | 180 |\n| Lyon | 140 |"
                    "\n\n- Book early\n\n- Keep receipts")


def test_aligned_plain_text_tables_become_pipe_rows(tmp_path: Path) -> None:
    report = ("Price list\n\n"
              "Item          Qty    Price\n"
              "------------  ---    -----\n"
              "Steel bolt     12     1.20\n"
              "Copper wire   150    10.00\n"
              "Totals follow.\n\n"
              "This is prose.  It has double spaces after its full stops,\n"
              "and its next line.  Has them too, elsewhere on the line.\n\n"
              "    indented  code  line\n\n"
              "Name\tCode\tValue\nAlpha\tA-1\t3\nBeta\tB-2\t4\n")
    expected = ("Price list\n\n| Item | Qty | Price |\n| --- | --- | --- |\n| Steel bolt | 12 | 1.20 |\n"
                "| Copper wire | 150 | 10.00 |\n\nTotals follow.\n\n"
                "This is prose. It has double spaces after its full stops,\nand its next line. Has them too, "
                "elsewhere on the line.\n\n indented code line\n\n"
                "| Name | Code | Value |\n| Alpha | A-1 | 3 |\n| Beta | B-2 | 4 |")
    assert _extracted(tmp_path, "report.txt", report.encode()) == expected
    assert _extracted(tmp_path, "report.dat", report.encode()) == expected
    # Code and other text formats are left as they are (spaces collapsed as before).
    code = "x = 1   # one\ny = 22  # two\n"
    assert _extracted(tmp_path, "script.py", code.encode()) == "x = 1 # one\ny = 22 # two"
    assert aligned_tables("a  b\n") == "a  b\n"  # one line is not a table


def test_normalise_keeps_structure() -> None:
    text = "#  Title\r\n\r\n\r\n\r\n|  a  |\tb |\n| --- | --- |\n\n\n- item\x00"
    assert normalise(text) == "# Title\n\n| a | b |\n| --- | --- |\n\n- item"

"""Small real documents of every accepted type, written by their own libraries (or by hand where
the format is text), each carrying a phrase the tests look for after ingestion."""

from __future__ import annotations

import io
import json
import zipfile


def docx_bytes(*paragraphs: str) -> bytes:
    """A Word document written with python-docx."""
    import docx

    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_bytes(title: str, body: str) -> bytes:
    """A one-slide presentation written with python-pptx."""
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = title
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1))
    box.text_frame.text = body
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def odt_bytes(heading: str, paragraph: str) -> bytes:
    """An OpenDocument text written with odfpy."""
    from odf.opendocument import OpenDocumentText
    from odf.text import H, P

    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text=heading))
    document.text.addElement(P(text=paragraph))
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()


def odp_bytes(text: str) -> bytes:
    """An OpenDocument presentation (one page, one text box) written with odfpy."""
    from odf import draw, style
    from odf.opendocument import OpenDocumentPresentation
    from odf.text import P

    document = OpenDocumentPresentation()
    layout = style.PageLayout(name="layout")
    document.automaticstyles.addElement(layout)
    master = style.MasterPage(name="master", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    page = draw.Page(masterpagename=master)
    document.presentation.addElement(page)
    frame = draw.Frame(width="20cm", height="3cm", x="1cm", y="1cm")
    page.addElement(frame)
    box = draw.TextBox()
    frame.addElement(box)
    box.addElement(P(text=text))
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()


def pdf_bytes(*lines: str) -> bytes:
    """A PDF written with fpdf2."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    for line in lines:
        pdf.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def rtf_bytes(text: str) -> bytes:
    """A small RTF document, by hand."""
    return ("{\\rtf1\\ansi\\deff0{\\fonttbl{\\f0 Helvetica;}}\\f0\\pard {\\b Note:} " + text + "\\par}").encode()


def text_document(extension: str, phrase: str) -> bytes:
    """A text-format file of this extension that contains `phrase`."""
    if extension in ("json", "geojson"):
        return json.dumps({"type": "Feature", "properties": {"note": phrase}}).encode()
    if extension in ("jsonl", "ndjson"):
        return (json.dumps({"id": 1, "note": phrase}) + "\n" + json.dumps({"id": 2, "note": "second"}) + "\n").encode()
    if extension == "xml":
        return f'<?xml version="1.0"?><notes><note lang="en">{phrase}</note></notes>'.encode()
    if extension in ("yaml", "yml"):
        return f"notes:\n  - text: {phrase}\n".encode()
    if extension == "sql":
        return f"-- {phrase}\nSELECT 1;\n".encode()
    if extension == "py":
        return f'"""{phrase}"""\nprint("hello")\n'.encode()
    if extension in ("js", "ts"):
        return f"// {phrase}\nconst x = 1;\n".encode()
    if extension == "r":
        return f"# {phrase}\nx <- c(1, 2)\n".encode()
    return f"Line one.\n{phrase}\n".encode("utf-8")


def html_document(phrase: str, secret: str, xhtml: bool = False) -> bytes:
    """An HTML page with the phrase in its body and `secret` only inside script and style."""
    head = '<?xml version="1.0"?>\n<html xmlns="http://www.w3.org/1999/xhtml">' if xhtml else "<!doctype html><html>"
    return (f"{head}<head><title>Page</title><style>body {{ content: '{secret}'; }}</style>"
            f"<script>var token = '{secret}';</script></head>"
            f"<body><h1>Heading</h1><p>{phrase}</p><script>console.log('{secret}')</script></body></html>").encode()


def zip_bomb(name_inside: str = "word/document.xml", inflated_mib: int = 64) -> bytes:
    """A small zip whose one member inflates to `inflated_mib` MiB of zeros (about 1000:1)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open(name_inside, "w", force_zip64=True) as member:
            block = b"\0" * (1024 * 1024)
            for _ in range(inflated_mib):
                member.write(block)
    return out.getvalue()


def crowded_zip(members: int) -> bytes:
    """A zip of many tiny members."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("word/document.xml", "<w:document/>")
        for i in range(members):
            archive.writestr(f"x/{i}.txt", "x")
    return out.getvalue()


def docx_with_structure(title: str, sections: list[tuple[str, list[str]]], table: list[list[str]],
                        table_after: int = 0) -> bytes:
    """A Word document written with python-docx: a Title, then for each section a Heading 1 and
    its paragraphs; `table` (first row the header) follows section `table_after`, each of its
    cells holding one paragraph per line of the cell's text."""
    import docx

    document = docx.Document()
    document.add_heading(title, level=0)
    for number, (heading, paragraphs) in enumerate(sections):
        document.add_heading(heading, level=1)
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
        if number == table_after:
            grid = document.add_table(rows=len(table), cols=len(table[0]))
            for cells, row in zip(table, grid.rows):
                for text, cell in zip(cells, row.cells):
                    lines = text.split("\n")
                    cell.text = lines[0]
                    for line in lines[1:]:
                        cell.add_paragraph(line)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def odt_with_structure(heading: str, subheading: str, paragraph: str, table: list[list[str]],
                       items: list[str]) -> bytes:
    """An OpenDocument text written with odfpy: a level-1 and a level-2 heading, a paragraph, a
    table (first row the header) and a bulleted list."""
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, List, ListItem, P

    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text=heading))
    document.text.addElement(H(outlinelevel=2, text=subheading))
    document.text.addElement(P(text=paragraph))
    grid = Table(name="Rates")
    grid.addElement(TableColumn(numbercolumnsrepeated=len(table[0])))
    for cells in table:
        row = TableRow()
        for text in cells:
            cell = TableCell()
            cell.addElement(P(text=text))
            row.addElement(cell)
        grid.addElement(row)
    document.text.addElement(grid)
    bullets = List()
    for item in items:
        entry = ListItem()
        entry.addElement(P(text=item))
        bullets.addElement(entry)
    document.text.addElement(bullets)
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()


def paragraph_flood_docx(inflated_mib: int) -> bytes:
    """A Word document whose `word/document.xml` is `inflated_mib` MiB of empty paragraphs, each
    `<w:p/>` followed at random by a space or a new line so that it zips at about 15:1, inside the archive
    limits (a plain run of them compresses past 100:1 and is refused before it is opened). Parsed,
    it is millions of XML elements: some hundreds of MB."""
    import numpy as np

    count = inflated_mib * 1024 * 1024 // 7
    variants = np.array([b"<w:p/> ", b"<w:p/>\n"], dtype="S7")
    body = variants[np.random.default_rng(0).integers(0, 2, count)].tobytes()
    xml = (b'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
           b'wordprocessingml/2006/main"><w:body>' + body + b"</w:body></w:document>")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", xml)
    return out.getvalue()


def odt_with_bad_spacing() -> bytes:
    """An OpenDocument text whose `<text:s text:c>` space count is not a number."""
    content = ('<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
               'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
               '<text:p>before<text:s text:c="many"/>after</text:p></office:text></office:body>'
               '</office:document-content>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", content)
    return out.getvalue()

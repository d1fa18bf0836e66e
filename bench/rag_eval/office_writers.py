"""Writers of the office formats the held-out set adds (ODF text, PowerPoint, Excel), from the
blocks of a source (blocks.py), and the zip rewrite that dates every member FIXED_DATE so that a
rebuild gives the same bytes.

An .odt is written by odfpy and a .pptx by python-pptx, the libraries a real author's tools stand
for (both in the test extra). No spreadsheet library is a dependency, so the .xlsx is written here
as the minimal SpreadsheetML package a spreadsheet program exports: a workbook, one worksheet per
sheet, shared strings, a bold style for header rows."""

from __future__ import annotations

import io
import re
import zipfile
from xml.sax.saxutils import escape, quoteattr

from blocks import FIXED_DATE, Block

_ISO_DATE = FIXED_DATE.strftime("%Y-%m-%dT%H:%M:%SZ")
AUTHOR = "Documentation team"


def fixed_zip_dates(data: bytes) -> bytes:
    """The same zip with every member dated FIXED_DATE (the libraries stamp the time of writing);
    each member keeps its compression (ODF's `mimetype` must stay stored)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            member = zipfile.ZipInfo(info.filename, FIXED_DATE.timetuple()[:6])
            member.compress_type = info.compress_type
            target.writestr(member, source.read(info))
    return out.getvalue()


# --- OpenDocument text ---------------------------------------------------------------------

def to_odt(blocks: list[Block]) -> bytes:
    """An OpenDocument text: outline-levelled headings, paragraphs, bulleted lists, tables with a
    header row."""
    from odf import dc, meta
    from odf.opendocument import OpenDocumentText
    from odf.style import ListLevelProperties, ParagraphProperties, Style, TableCellProperties, TextProperties
    from odf.table import Table, TableCell, TableColumn, TableHeaderRows, TableRow
    from odf.text import H, List, ListItem, ListLevelStyleBullet, ListStyle, P

    document = OpenDocumentText()
    headings = {}
    for level, size in ((1, "18pt"), (2, "14pt"), (3, "12pt")):
        style = Style(name=f"Heading {level}", family="paragraph")
        style.addElement(TextProperties(fontsize=size, fontweight="bold"))
        style.addElement(ParagraphProperties(margintop="0.2cm", marginbottom="0.1cm"))
        document.styles.addElement(style)
        headings[level] = style
    bold = Style(name="Table Heading", family="paragraph")
    bold.addElement(TextProperties(fontweight="bold"))
    document.styles.addElement(bold)
    cell_style = Style(name="Grid", family="table-cell")
    cell_style.addElement(TableCellProperties(border="0.5pt solid #000000", padding="0.05cm"))
    document.automaticstyles.addElement(cell_style)
    bullets = ListStyle(name="Bullets")
    level_style = ListLevelStyleBullet(level=1, bulletchar="•")
    level_style.addElement(ListLevelProperties(spacebefore="0.4cm", minlabelwidth="0.4cm"))
    bullets.addElement(level_style)
    document.automaticstyles.addElement(bullets)
    tables = 0
    for block in blocks:
        if block.kind[0] == "h":
            level = int(block.kind[1])
            document.text.addElement(H(outlinelevel=level, stylename=headings[level], text=block.text))
        elif block.kind == "p":
            document.text.addElement(P(text=block.text))
        elif block.kind == "ul":
            bulleted = List(stylename=bullets)
            for item in block.items:
                entry = ListItem()
                entry.addElement(P(text=item))
                bulleted.addElement(entry)
            document.text.addElement(bulleted)
        else:
            tables += 1
            table = Table(name=f"Table{tables}")
            table.addElement(TableColumn(numbercolumnsrepeated=len(block.rows[0])))
            head = TableHeaderRows()
            head.addElement(_odf_row(block.rows[0], TableRow, TableCell, P, cell_style, bold))
            table.addElement(head)
            for row in block.rows[1:]:
                table.addElement(_odf_row(row, TableRow, TableCell, P, cell_style, None))
            document.text.addElement(table)
    title = next(block.text for block in blocks if block.kind == "h1")
    for element in (dc.Title(text=title), meta.InitialCreator(text=AUTHOR), dc.Creator(text=AUTHOR),
                    meta.CreationDate(text=_ISO_DATE), dc.Date(text=_ISO_DATE)):
        document.meta.addElement(element)
    out = io.BytesIO()
    document.write(out)
    return fixed_zip_dates(out.getvalue())


def _odf_row(cells: list[str], row_type: type, cell_type: type, paragraph_type: type, cell_style: object,
             paragraph_style: object) -> object:
    row = row_type()
    for text in cells:
        cell = cell_type(valuetype="string", stylename=cell_style)
        cell.addElement(paragraph_type(text=text, stylename=paragraph_style) if paragraph_style
                        else paragraph_type(text=text))
        row.addElement(cell)
    return row


# --- PowerPoint ----------------------------------------------------------------------------

def to_pptx(blocks: list[Block]) -> bytes:
    """A 16:9 deck: the h1 and the paragraph after it make the title slide; every h2 starts a slide
    titled by it, whose bullets, paragraphs and h3 lines fill the body and whose table (if any) is a
    real table shape below them. No speaker notes."""
    from pptx import Presentation
    from pptx.util import Inches, Pt

    deck = Presentation()
    deck.slide_width, deck.slide_height = Inches(13.333), Inches(7.5)
    slides: list[tuple[Block, list[Block]]] = []
    for block in blocks:
        if block.kind in ("h1", "h2"):
            slides.append((block, []))
        else:
            slides[-1][1].append(block)
    for heading, body in slides:
        if heading.kind == "h1":
            slide = deck.slides.add_slide(deck.slide_layouts[0])
            slide.shapes.title.text = heading.text
            slide.placeholders[1].text = "\n".join(block.text for block in body if block.kind == "p")
            continue
        table = next((block for block in body if block.kind == "table"), None)
        slide = deck.slides.add_slide(deck.slide_layouts[5 if table else 1])
        slide.shapes.title.text = heading.text
        lines: list[tuple[str, bool]] = []  # (text, bold)
        for block in body:
            if block.kind == "ul":
                lines.extend((item, False) for item in block.items)
            elif block.kind == "p":
                lines.append((block.text, False))
            elif block.kind == "h3":
                lines.append((block.text, True))
        top = Inches(1.5)
        if lines:
            if table:
                frame = slide.shapes.add_textbox(Inches(0.6), top, Inches(12.1), Inches(0.4 * len(lines))).text_frame
                frame.word_wrap = True
            else:
                frame = slide.placeholders[1].text_frame
            for index, (text, strong) in enumerate(lines):
                paragraph = frame.paragraphs[0] if index == 0 else frame.add_paragraph()
                paragraph.text = text
                paragraph.font.size, paragraph.font.bold = Pt(16), strong or None
            top = Inches(1.6 + 0.45 * len(lines))
        if table:
            rows, columns = len(table.rows), len(table.rows[0])
            shape = slide.shapes.add_table(rows, columns, Inches(0.6), top, Inches(12.1), Inches(0.4 * rows))
            for r, row in enumerate(table.rows):
                for c, text in enumerate(row):
                    cell = shape.table.cell(r, c)
                    cell.text = text
                    cell.text_frame.paragraphs[0].font.size = Pt(14)
    properties = deck.core_properties
    properties.author = properties.last_modified_by = AUTHOR
    properties.title = next(block.text for block in blocks if block.kind == "h1")
    properties.created = properties.modified = FIXED_DATE.replace(tzinfo=None)
    properties.revision = 1
    out = io.BytesIO()
    deck.save(out)
    return fixed_zip_dates(out.getvalue())


# --- Excel ---------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?")
_SHEET_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"


def _column(index: int) -> str:
    """A (0-based) column's letters: 0 is A, 26 is AA."""
    letters = ""
    index += 1
    while index:
        index, remainder = divmod(index - 1, 26)
        letters = chr(65 + remainder) + letters
    return letters


def _sheets(blocks: list[Block]) -> list[tuple[str, list[tuple[list[str], bool]]]]:
    """(sheet name, rows) per sheet: every h2 starts a sheet named by it; the h1 is the first
    sheet's first row; h3 lines, paragraphs and bullets are one-cell rows; a table's header row is
    bold (the bool); a blank row between blocks."""
    sheets: list[tuple[str, list[tuple[list[str], bool]]]] = []
    title: list[tuple[list[str], bool]] = []
    for block in blocks:
        if block.kind == "h1":
            title = [([block.text], True)]
            continue
        if block.kind == "h2":
            sheets.append((block.text, list(title)))
            title = []
            continue
        rows = sheets[-1][1]
        if rows:
            rows.append(([], False))
        if block.kind == "table":
            rows.append((block.rows[0], True))
            rows.extend((row, False) for row in block.rows[1:])
        elif block.kind == "ul":
            rows.extend(([item], False) for item in block.items)
        else:
            rows.append(([block.text], block.kind == "h3"))
    return sheets


def _worksheet(rows: list[tuple[list[str], bool]], strings: dict[str, int], uses: list[int]) -> str:
    """A worksheet's XML; its text cells are added to `strings` (text: index) and counted in `uses`."""
    widths: dict[int, int] = {}
    xml_rows = []
    for number, (cells, bold) in enumerate(rows, start=1):
        xml_cells = []
        for index, text in enumerate(cells):
            if not text:
                continue
            reference, style = f"{_column(index)}{number}", ' s="1"' if bold else ""
            if len(cells) > 1:  # a one-cell row is a note that runs across; it sets no width
                widths[index] = max(widths.get(index, 8), min(len(text) + 2, 60))
            if _NUMBER.fullmatch(text) and not bold:
                xml_cells.append(f'<c r="{reference}"{style}><v>{text}</v></c>')
            else:
                position = strings.setdefault(text, len(strings))
                uses[0] += 1
                xml_cells.append(f'<c r="{reference}"{style} t="s"><v>{position}</v></c>')
        xml_rows.append(f'<row r="{number}">{"".join(xml_cells)}</row>' if xml_cells else f'<row r="{number}"/>')
    columns = "".join(f'<col min="{i + 1}" max="{i + 1}" width="{w}" customWidth="1"/>'
                      for i, w in sorted(widths.items()))
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<worksheet xmlns="{_SHEET_NS}" '
            f'xmlns:r="{_REL_NS}">' + (f"<cols>{columns}</cols>" if columns else "")
            + f'<sheetData>{"".join(xml_rows)}</sheetData></worksheet>')


def to_xlsx(blocks: list[Block]) -> bytes:
    """A workbook with one worksheet per h2 of the source (see _sheets), strings shared."""
    sheets = _sheets(blocks)
    strings: dict[str, int] = {}
    uses = [0]  # cells that refer to a shared string
    worksheets = [_worksheet(rows, strings, uses) for _, rows in sheets]
    header = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    count = len(sheets)
    overrides = "".join(f'<Override PartName="/xl/worksheets/sheet{i}.xml" ContentType="application/'
                        'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>' for i in range(1, count + 1))
    parts = {
        "[Content_Types].xml": header + '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'spreadsheetml.sheet.main+xml"/>' + overrides
        + '<Override PartName="/xl/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'spreadsheetml.styles+xml"/><Override PartName="/xl/sharedStrings.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
        '<Override PartName="/docProps/core.xml" ContentType="application/vnd.openxmlformats-package.'
        'core-properties+xml"/><Override PartName="/docProps/app.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.extended-properties+xml"/></Types>',
        "_rels/.rels": header + f'<Relationships xmlns="{_PKG_REL_NS}">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'officeDocument" Target="xl/workbook.xml"/><Relationship Id="rId2" Type="http://schemas.openxmlformats.'
        'org/package/2006/relationships/metadata/core-properties" Target="docProps/core.xml"/>'
        '<Relationship Id="rId3" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'extended-properties" Target="docProps/app.xml"/></Relationships>',
        "docProps/core.xml": header + '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/'
        '2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:dcterms="http://purl.'
        'org/dc/terms/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
        f"<dc:title>{escape(next(b.text for b in blocks if b.kind == 'h1'))}</dc:title>"
        f"<dc:creator>{AUTHOR}</dc:creator><cp:lastModifiedBy>{AUTHOR}</cp:lastModifiedBy>"
        f'<dcterms:created xsi:type="dcterms:W3CDTF">{_ISO_DATE}</dcterms:created>'
        f'<dcterms:modified xsi:type="dcterms:W3CDTF">{_ISO_DATE}</dcterms:modified></cp:coreProperties>',
        "docProps/app.xml": header + '<Properties xmlns="http://schemas.openxmlformats.org/officeDocument/2006/'
        'extended-properties"><Application>Microsoft Excel</Application></Properties>',
        "xl/workbook.xml": header + f'<workbook xmlns="{_SHEET_NS}" xmlns:r="{_REL_NS}"><sheets>'
        + "".join(f"<sheet name={quoteattr(name)} sheetId=\"{i}\" r:id=\"rId{i}\"/>"
                  for i, (name, _) in enumerate(sheets, start=1)) + "</sheets></workbook>",
        "xl/_rels/workbook.xml.rels": header + f'<Relationships xmlns="{_PKG_REL_NS}">'
        + "".join(f'<Relationship Id="rId{i}" Type="{_REL_NS}/worksheet" Target="worksheets/sheet{i}.xml"/>'
                  for i in range(1, count + 1))
        + f'<Relationship Id="rId{count + 1}" Type="{_REL_NS}/styles" Target="styles.xml"/>'
        f'<Relationship Id="rId{count + 2}" Type="{_REL_NS}/sharedStrings" Target="sharedStrings.xml"/>'
        "</Relationships>",
        "xl/styles.xml": header + f'<styleSheet xmlns="{_SHEET_NS}"><fonts count="2"><font><sz val="11"/>'
        '<name val="Calibri"/></font><font><b/><sz val="11"/><name val="Calibri"/></font></fonts>'
        '<fills count="2"><fill><patternFill patternType="none"/></fill><fill><patternFill patternType="gray125"/>'
        '</fill></fills><borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders>'
        '<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs>'
        '<cellXfs count="2"><xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/>'
        '<xf numFmtId="0" fontId="1" fillId="0" borderId="0" xfId="0" applyFont="1"/></cellXfs>'
        '<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles></styleSheet>',
        "xl/sharedStrings.xml": header + f'<sst xmlns="{_SHEET_NS}" count="{uses[0]}" '
        f'uniqueCount="{len(strings)}">' + "".join(f'<si><t xml:space="preserve">{escape(text)}</t></si>'
                                                   for text in strings) + "</sst>",
        **{f"xl/worksheets/sheet{i}.xml": sheet for i, sheet in enumerate(worksheets, start=1)},
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in parts.items():
            archive.writestr(zipfile.ZipInfo(name, FIXED_DATE.timetuple()[:6]), text.encode(), zipfile.ZIP_DEFLATED)
    return out.getvalue()

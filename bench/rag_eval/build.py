"""Writes the eval's upload files from their readable sources, and checks the question set.

    .venv/bin/python bench/rag_eval/build.py          # write files/, then check
    .venv/bin/python bench/rag_eval/build.py --check  # check only (the committed files)

Each document's source is `docs/<name>.md` in a small Markdown subset (#, ##, ### headings,
paragraphs, "- " bullets, pipe tables); FORMATS says which format each is uploaded as. The files
are written by the libraries a real author would use (python-docx, fpdf2) with fixed dates, so a
rebuild gives the same bytes. The check reads every built file back through the server's own
extractor: it fails when a question's accepted answers are missing from its document's source,
or a document is outside 800 to 3,000 words, and notes answers that the extractor loses.
"""

from __future__ import annotations

import argparse
import datetime
import html
import io
import json
import sys
import textwrap
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grading import mentions_any

HERE = Path(__file__).resolve().parent
DOCS, FILES, QUESTIONS = HERE / "docs", HERE / "files", HERE / "questions.json"
FORMATS = {"travel_policy": "docx", "release_notes": "pdf", "employee_handbook": "html",
           "product_datasheet": "html", "club_rules": "md", "bus_timetable": "txt", "recipes": "txt",
           "lab_safety": "docx"}
FIXED_DATE = datetime.datetime(2026, 1, 5, 9, 0, tzinfo=datetime.timezone.utc)
MIN_WORDS, MAX_WORDS = 800, 3000


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


def to_docx(blocks: list[Block]) -> bytes:
    """A Word document with real headings, bullet paragraphs and a grid table."""
    import docx

    document = docx.Document()
    for block in blocks:
        if block.kind[0] == "h":
            document.add_heading(block.text, level=int(block.kind[1]) - 1)
        elif block.kind == "p":
            document.add_paragraph(block.text)
        elif block.kind == "ul":
            for item in block.items:
                document.add_paragraph(item, style="List Bullet")
        else:
            table = document.add_table(rows=len(block.rows), cols=len(block.rows[0]), style="Table Grid")
            for cells, row in zip(table.rows, block.rows):
                for cell, text in zip(cells.cells, row):
                    cell.text = text
            for cell in table.rows[0].cells:
                cell.paragraphs[0].runs[0].bold = True
    properties = document.core_properties
    properties.author, properties.created, properties.modified = "Documentation team", FIXED_DATE, FIXED_DATE
    out = io.BytesIO()
    document.save(out)
    return _fixed_zip_dates(out.getvalue())


def _fixed_zip_dates(data: bytes) -> bytes:
    """The same zip with every member dated FIXED_DATE (python-docx stamps the time of writing)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            member = zipfile.ZipInfo(info.filename, FIXED_DATE.timetuple()[:6])
            member.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(member, source.read(info))
    return out.getvalue()


def to_pdf(blocks: list[Block]) -> bytes:
    """A PDF with bold headings, wrapped paragraphs and a ruled table (fpdf2's core fonts: Latin-1)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_auto_page_break(True, margin=15)
    pdf.add_page()
    sizes = {"h1": 16, "h2": 13, "h3": 11}
    for block in blocks:
        if block.kind in sizes:
            pdf.set_font("Helvetica", "B", sizes[block.kind])
            pdf.multi_cell(0, 8, block.text, new_x="LMARGIN", new_y="NEXT")
        elif block.kind == "table":
            pdf.set_font("Helvetica", size=9)
            with pdf.table(first_row_as_headings=True) as table:
                for row in block.rows:
                    table.row(row)
        else:
            pdf.set_font("Helvetica", size=10)
            for text in (block.items if block.kind == "ul" else [block.text]):
                pdf.multi_cell(0, 5, ("- " if block.kind == "ul" else "") + text, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)
    return bytes(pdf.output())


def to_html(blocks: list[Block]) -> bytes:
    """A standalone HTML page: h1/h2/h3, p, ul and a table with a header row."""
    title = next(block.text for block in blocks if block.kind == "h1")
    parts = [f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
             '<style>body { font-family: sans-serif; max-width: 50em; } td, th { border: 1px solid #999; }</style>\n'
             '</head>\n<body>']
    for block in blocks:
        if block.kind[0] == "h":
            parts.append(f"<{block.kind}>{html.escape(block.text)}</{block.kind}>")
        elif block.kind == "p":
            parts.append(f"<p>{html.escape(block.text)}</p>")
        elif block.kind == "ul":
            parts.append("<ul>\n" + "\n".join(f"  <li>{html.escape(item)}</li>" for item in block.items) + "\n</ul>")
        else:
            head = "".join(f"<th>{html.escape(cell)}</th>" for cell in block.rows[0])
            body = "\n".join("  <tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
                             for row in block.rows[1:])
            parts.append(f"<table>\n<thead>\n  <tr>{head}</tr>\n</thead>\n<tbody>\n{body}\n</tbody>\n</table>")
    parts.append("</body>\n</html>\n")
    return "\n".join(parts).encode()


def to_txt(blocks: list[Block]) -> bytes:
    """Plain text as people type it: underlined headings, wrapped lines, space-aligned tables."""
    parts = []
    for block in blocks:
        if block.kind in ("h1", "h2"):
            parts.append(block.text + "\n" + ("=" if block.kind == "h1" else "-") * len(block.text))
        elif block.kind == "h3":
            parts.append(block.text.upper())
        elif block.kind == "p":
            parts.append(textwrap.fill(block.text, 78))
        elif block.kind == "ul":
            parts.append("\n".join(textwrap.fill(item, 78, initial_indent="  * ", subsequent_indent="    ")
                                   for item in block.items))
        else:
            widths = [max(len(row[i]) for row in block.rows) for i in range(len(block.rows[0]))]
            lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in block.rows]
            lines.insert(1, "  ".join("-" * width for width in widths))
            parts.append("\n".join(lines))
    return ("\n\n".join(parts) + "\n").encode()


def render(name: str) -> tuple[str, bytes]:
    """(file name, bytes) of the document `name` in its upload format."""
    source = (DOCS / f"{name}.md").read_text()
    extension = FORMATS[name]
    if extension == "md":
        return f"{name}.md", source.encode()  # the source is already what a Markdown author writes
    writer = {"docx": to_docx, "pdf": to_pdf, "html": to_html, "txt": to_txt}[extension]
    return f"{name}.{extension}", writer(parse(source))


def extracted_text(path: Path) -> str:
    """What the server will index: its own extractor on the built file."""
    sys.path.insert(0, str(HERE.parent.parent / "src"))
    from inferd.services.ingest.extract import extract_text

    return extract_text(path, path.name).text


def check() -> tuple[list[str], list[str]]:
    """(problems with the set, notes on what the server's extractor loses). A problem is a question
    its document does not answer, a missing kind, or a document of the wrong length; a note is an
    accepted answer present in the source but not in the text the server extracts from the built
    file (for example table cells run together): a finding about the server, not about the set."""
    problems, notes, sources, extracted = [], [], {}, {}
    for name, extension in FORMATS.items():
        file_name = f"{name}.{extension}"
        sources[file_name] = (DOCS / f"{name}.md").read_text()
        extracted[file_name] = extracted_text(FILES / file_name)
        words = len(sources[file_name].split())
        if not MIN_WORDS <= words <= MAX_WORDS:
            problems.append(f"{file_name}: {words} words, outside {MIN_WORDS} to {MAX_WORDS}")
    questions = json.loads(QUESTIONS.read_text())
    kinds: dict[str, set[str]] = {}
    for question in questions:
        document = question["document"]
        if document not in sources:
            problems.append(f"{question['id']}: no document {document}")
            continue
        kinds.setdefault(document, set()).add(question["kind"])
        if not mentions_any(sources[document], question["answers"]):
            problems.append(f"{question['id']}: no accepted answer in the source of {document}")
        elif not mentions_any(extracted[document], question["answers"]):
            notes.append(f"{question['id']}: the answer is lost when the server extracts {document}")
    for document, seen in kinds.items():
        if seen != {"lookup", "buried", "number", "chained", "table"}:
            problems.append(f"{document}: question kinds {sorted(seen)}")
    if len({q["id"] for q in questions}) != len(questions):
        problems.append("duplicate question ids")
    return problems, notes


def main() -> None:
    """Build (unless --check), then check; exit 1 on any problem."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check the files already built")
    args = parser.parse_args()
    if not args.check:
        FILES.mkdir(exist_ok=True)
        for name in FORMATS:
            file_name, data = render(name)
            (FILES / file_name).write_bytes(data)
            print(f"{file_name}: {len(data):,} bytes, {len((DOCS / f'{name}.md').read_text().split()):,} words")
    problems, notes = check()
    for note in notes:
        print("note:", note)
    for problem in problems:
        print("problem:", problem)
    print(f"{len(json.loads(QUESTIONS.read_text()))} questions, {len(FORMATS)} documents: "
          f"{'OK' if not problems else f'{len(problems)} problems'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

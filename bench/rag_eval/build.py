"""Writes the eval's upload files from their readable sources, and checks a question set.

    .venv/bin/python bench/rag_eval/build.py                  # the first set: write files/, then check
    .venv/bin/python bench/rag_eval/build.py --check          # check only (the committed files)
    .venv/bin/python bench/rag_eval/build.py --set heldout    # the held-out set (heldout/), the same way

A set is a folder with docs/, files/ and questions.json: the first set is this folder, the
held-out set heldout/ (never tuned on: see README.md). Each document's source is
`docs/<name>.md` in a small Markdown subset (blocks.py: #, ##, ### headings, paragraphs, "- "
bullets, pipe tables), or `docs/<name>.<format>` when the source is already in its upload format
(a Markdown file, an exported mail thread), which is copied as is; a set's formats say which
format each document is uploaded as. The files are written by the libraries a real author would
use (python-docx, fpdf2, odfpy, python-pptx; the .xlsx by office_writers.py) with fixed dates, so
a rebuild gives the same bytes. The check reads every built file back through the server's own
extractor: it fails when a question's first accepted answer is missing from its document's
source, a document lacks one of the five kinds, or a document is outside 800 to 3,000 words, and
notes answers that the extractor loses (a file it refuses loses them all).
"""

from __future__ import annotations

import argparse
import html
import io
import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from blocks import FIXED_DATE, Block, parse
from grading import mentions, mentions_any
from office_writers import fixed_zip_dates, to_odt, to_pptx, to_xlsx

HERE = Path(__file__).resolve().parent
FORMATS = {"travel_policy": "docx", "release_notes": "pdf", "employee_handbook": "html",
           "product_datasheet": "html", "club_rules": "md", "bus_timetable": "txt", "recipes": "txt",
           "lab_safety": "docx"}
HELDOUT_FORMATS = {"services_contract": "docx", "lab_protocol": "pdf", "meeting_minutes": "md", "support_faq": "html",
                   "product_manual": "odt", "price_list": "xlsx", "slide_deck": "pptx", "email_thread": "txt"}
MIN_WORDS, MAX_WORDS = 800, 3000
KINDS = {"lookup", "buried", "number", "chained", "table"}


@dataclass(frozen=True)
class EvalSet:
    """A question set: its folder (docs/, files/, questions.json) and each document's upload format."""

    root: Path
    formats: dict[str, str]

    @property
    def docs(self) -> Path:
        return self.root / "docs"

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def questions(self) -> Path:
        return self.root / "questions.json"

    def source(self, name: str) -> Path:
        """The readable source: already in the upload format when such a file exists, else Markdown."""
        verbatim = self.docs / f"{name}.{self.formats[name]}"
        return verbatim if verbatim.exists() else self.docs / f"{name}.md"


SETS = {"first": EvalSet(HERE, FORMATS), "heldout": EvalSet(HERE / "heldout", HELDOUT_FORMATS)}


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
    return fixed_zip_dates(out.getvalue())


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


def render(eval_set: EvalSet, name: str) -> tuple[str, bytes]:
    """(file name, bytes) of the document `name` in its upload format."""
    extension, source = eval_set.formats[name], eval_set.source(name)
    if source.suffix == f".{extension}":
        return source.name, source.read_bytes()  # the source is already what its author writes
    writer = {"docx": to_docx, "pdf": to_pdf, "html": to_html, "txt": to_txt, "odt": to_odt, "pptx": to_pptx,
              "xlsx": to_xlsx}[extension]
    return f"{name}.{extension}", writer(parse(source.read_text()))


def extracted_text(path: Path) -> str:
    """What the server will index: its own extractor on the built file (raises its 400 error when
    it refuses the file)."""
    sys.path.insert(0, str(HERE.parent.parent / "src"))
    from inferd.services.ingest.extract import extract_text

    return extract_text(path, path.name).text


def check(eval_set: EvalSet) -> tuple[list[str], list[str]]:
    """(problems with the set, notes on what the server's extractor loses). A problem is a question
    whose first accepted answer (the document's own spelling; the others are spellings a reply may
    use) is not in its document's source, a missing kind, or a document of the wrong length; a note
    is an accepted answer present in the source but not in the text the server extracts from the
    built file (table cells run together, a format it refuses): a finding about the server, not
    about the set."""
    from inferd.errors import InvalidRequest

    problems, notes, sources, extracted = [], [], {}, {}
    for name, extension in eval_set.formats.items():
        file_name = f"{name}.{extension}"
        sources[file_name] = eval_set.source(name).read_text()
        try:
            extracted[file_name] = extracted_text(eval_set.files / file_name)
        except InvalidRequest as exc:
            extracted[file_name] = ""
            notes.append(f"{file_name}: the server's extractor refuses it ({exc})")
        words = len(sources[file_name].split())
        if not MIN_WORDS <= words <= MAX_WORDS:
            problems.append(f"{file_name}: {words} words, outside {MIN_WORDS} to {MAX_WORDS}")
    questions = json.loads(eval_set.questions.read_text())
    kinds: dict[str, set[str]] = {document: set() for document in sources}
    for question in questions:
        document = question["document"]
        if document not in sources:
            problems.append(f"{question['id']}: no document {document}")
            continue
        kinds[document].add(question["kind"])
        if not mentions(sources[document], question["answers"][0]):
            problems.append(f"{question['id']}: its first accepted answer is not in the source of {document}")
        elif not mentions_any(extracted[document], question["answers"]):
            notes.append(f"{question['id']}: the answer is lost when the server extracts {document}")
    for document, seen in kinds.items():
        if seen != KINDS:
            problems.append(f"{document}: question kinds {sorted(seen)}")
    if len({q["id"] for q in questions}) != len(questions):
        problems.append("duplicate question ids")
    return problems, notes


def main() -> None:
    """Build (unless --check), then check; exit 1 on any problem."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check the files already built")
    parser.add_argument("--set", choices=sorted(SETS), default="first", help="which question set (default: first)")
    args = parser.parse_args()
    eval_set = SETS[args.set]
    if not args.check:
        eval_set.files.mkdir(exist_ok=True)
        for name in eval_set.formats:
            file_name, data = render(eval_set, name)
            (eval_set.files / file_name).write_bytes(data)
            print(f"{file_name}: {len(data):,} bytes, {len(eval_set.source(name).read_text().split()):,} words")
    problems, notes = check(eval_set)
    for note in notes:
        print("note:", note)
    for problem in problems:
        print("problem:", problem)
    print(f"{len(json.loads(eval_set.questions.read_text()))} questions, {len(eval_set.formats)} documents: "
          f"{'OK' if not problems else f'{len(problems)} problems'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

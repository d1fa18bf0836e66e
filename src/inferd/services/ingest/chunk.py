"""Extracted text (light Markdown, extract.py) into chunks that follow the document's structure.

A chunk is what all-MiniLM-L6-v2 embeds and what keyword search indexes, and later what a small
model reads as a passage: it carries its heading path ("Travel policy > 4. Booking") on its first
line, holds blocks of one section only, and a table chunk repeats the table's header row, so a
value read on its own still has its section and its column names.

Sizes are counted in estimated word pieces (`estimate_tokens`), not characters: a chunk's heading
path and body stay within CHUNK_TOKENS, which leaves the embedder's 256-piece window room for the
estimate's error (codes and numbers split into more pieces than prose) and its two special tokens.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import accumulate

CHUNK_TOKENS = 200  # heading path + body, in estimated word pieces (the embedder reads 256)
OVERLAP_TOKENS = 40  # a long paragraph's next piece starts about this far back
SMALL_SECTION_TOKENS = 40  # a section this small joins the next one (see _Packer._absorbs)
HEADING_TOKENS = 48  # at most this much of a chunk goes to its heading path
LEAD_TOKENS = 40  # a list's introducing sentence is repeated on the list's next chunks up to this size
# Character equivalents of the budgets above for English prose (about 4.5 characters a piece),
# recorded in a source's config.
CHUNK_CHARS = 900
OVERLAP_CHARS = 160


@dataclass(frozen=True)
class Chunk:
    """One chunk: `text` is embedded and indexed; the body is `document[start:end]`, after the
    table's header row when the chunk continues a table."""

    text: str  # the heading path line (if any) + "\n" + the body
    start: int  # offset of the body's first character in the document
    end: int  # offset just past the body's last character
    heading: str  # the heading path, "" when none


# --- the token estimate --------------------------------------------------------------------
# BERT's uncased tokenizer splits on whitespace and punctuation (each punctuation character is a
# piece), lower-cases and strips accents, then cuts each word into vocabulary pieces: a common word
# is one piece, a rare one several. Rarity shows in length, digits, capitals (names, acronyms,
# camelCase identifiers) and accents (words of other languages). The weights below were fitted with
# the real tokenizer on licences, package descriptions, release notes, German and French prose and
# random codes: real/estimate averages 0.91 per chunk, 1.05 at the 95th percentile, 1.24 at worst,
# so a chunk of CHUNK_TOKENS stays inside the window (tests/sources/test_chunk.py checks it).

_ALNUM = r"[^\W_]"
_RUNS = re.compile(rf"{_ALNUM}+|[^\w\s]|_")  # one piece each: a letter/digit run, a punctuation character
# Runs over 100 characters are one [UNK] piece, so the patterns below stop at 100.
_LONG_LATIN = re.compile(rf"(?<!{_ALNUM})[a-zA-Z\u00c0-\u024f]{{6,100}}(?!{_ALNUM})")
_WITH_DIGITS = re.compile(rf"(?<!{_ALNUM})[^\W\d_]*\d{_ALNUM}*")
_CAPITALS = re.compile(rf"(?<!{_ALNUM})[A-Z](?:[a-z]{{3}}|[A-Z]{{2,4}}(?!{_ALNUM}))")  # Names, ACRONYMS
_CAMEL = re.compile(r"[a-z][A-Z]")
_ACCENTED = re.compile(r"[\u00c0-\u024f]")
_NON_LATIN = re.compile(r"[^\W\d_\u0000-\u024f]")  # Greek, Cyrillic, CJK...: about a piece a character
_LONG_WORD = (0.7, 0.12, 0.4)  # a Latin word of 6+ letters: +0.7, +0.12 a letter past 6, +0.4 a letter past 13
_DIGIT_PIECES = 0.6  # a number of 3+ digits: 0.6 pieces a digit ("4471" -> 44 ##7 ##1)
_CODE_PIECES = 0.75  # a run mixing letters and digits ("QX4471B"): 0.75 pieces a character
_NAME, _ACRONYM, _CAMEL_PIECES, _ACCENT_PIECES = 0.4, 0.5, 0.8, 1.5


def _cost(text: str) -> float:
    """The estimated word pieces of `text`, unrounded: the costs of its words add up to it."""
    pieces = float(len(_RUNS.findall(text)))
    base, per_letter, per_long_letter = _LONG_WORD
    for word in _LONG_LATIN.findall(text):
        length = len(word)
        pieces += base + per_letter * (length - 6) + (per_long_letter * (length - 13) if length > 13 else 0.0)
    for run in _WITH_DIGITS.findall(text):
        if len(run) > 100:
            continue
        if run.isdigit():
            if len(run) > 2:
                pieces += _DIGIT_PIECES * len(run) - 1
        else:
            pieces += _CODE_PIECES * len(run) - 1
    for capital in _CAPITALS.findall(text):
        pieces += _NAME if capital[1].islower() else _ACRONYM
    pieces += _CAMEL_PIECES * len(_CAMEL.findall(text))
    if not text.isascii():
        pieces += _ACCENT_PIECES * len(_ACCENTED.findall(text)) + len(_NON_LATIN.findall(text))
    return pieces


def estimate_tokens(text: str) -> int:
    """About how many word pieces all-MiniLM-L6-v2's (BERT uncased) tokenizer cuts `text` into,
    special tokens not counted; errs high."""
    return math.ceil(_cost(text))


# --- blocks --------------------------------------------------------------------------------

_ATX = re.compile(r" {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?")
_UNDERLINE = re.compile(r"=+|-+")
_RULE = re.compile(r"(?:[-*_=][ \t]*){3,}")
_SEPARATOR_ROW = re.compile(r"\|(?:[ \t]*:?-+:?[ \t]*\|)+")
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*+\u2022]|\d{1,3}[.)])[ \t]+\S")
_SETEXT_MAX_CHARS = 120  # a longer line over an underline is a paragraph, not a title


@dataclass(frozen=True)
class _Block:
    kind: str  # "heading", "text" (a paragraph or a list item) or "table"
    start: int
    end: int
    level: int = 0
    title: str = ""
    rows: tuple[tuple[int, int], ...] = ()  # a table's data rows (separator rows left out)


def _blocks(text: str) -> list[_Block]:
    """The document as headings, paragraphs, list items and pipe-table runs, in order."""
    blocks: list[_Block] = []
    paragraph: list[int] = []  # [start, end] of the open paragraph
    table: list[int] = []  # [start, end] of the open table run
    rows: list[tuple[int, int]] = []

    def close_paragraph() -> None:
        if paragraph:
            blocks.append(_Block("text", paragraph[0], paragraph[1]))
            paragraph.clear()

    def close_table() -> None:
        if table:
            # A run of separator rows alone holds no data: it is text.
            blocks.append(_Block("table", table[0], table[1], rows=tuple(rows)) if rows
                          else _Block("text", table[0], table[1]))
            table.clear()
            rows.clear()

    lines = text.split("\n")
    offsets = list(accumulate((len(line) + 1 for line in lines), initial=0))
    skip_next = fenced = False
    for index, line in enumerate(lines):
        if skip_next:
            skip_next = False
            continue
        stripped = line.strip()
        if not stripped:
            close_paragraph()
            close_table()
            continue
        start = offsets[index] + len(line) - len(line.lstrip())
        end = offsets[index] + len(line.rstrip())
        fence = stripped.startswith(("```", "~~~"))
        if fenced or fence:  # a code block's `# comment` is no heading: its lines are only text
            fenced = fenced != fence
            close_table()
            if paragraph:
                paragraph[1] = end
            else:
                paragraph.extend((start, end))
            continue
        if stripped[0] == "|" and stripped[-1] == "|" and len(stripped) > 1:
            close_paragraph()
            if not table:
                table.extend((start, end))
            table[1] = end
            if not _SEPARATOR_ROW.fullmatch(stripped):
                rows.append((start, end))
            continue
        close_table()
        if stripped[0] == "#" and (atx := _ATX.fullmatch(line.rstrip())) and atx.group(2).strip():
            close_paragraph()
            blocks.append(_Block("heading", start, end, level=len(atx.group(1)), title=atx.group(2).strip()))
            continue
        if not paragraph and index + 1 < len(lines) and len(stripped) <= _SETEXT_MAX_CHARS:
            underline = lines[index + 1].strip()
            if len(underline) >= 3 and _UNDERLINE.fullmatch(underline) and not _LIST_ITEM.match(line):
                blocks.append(_Block("heading", start, end, level=1 if underline[0] == "=" else 2,
                                     title=stripped))
                skip_next = True
                continue
        if _RULE.fullmatch(stripped):  # a thematic break separates, it says nothing
            close_paragraph()
            continue
        if paragraph and not _LIST_ITEM.match(line):
            paragraph[1] = end
        else:  # each list item is a block of its own, so a list packs and splits between items
            close_paragraph()
            paragraph.extend((start, end))
    close_paragraph()
    close_table()
    return blocks


# --- packing -------------------------------------------------------------------------------

_WORD = re.compile(r"\S{1,100}")  # longer runs (minified data) are cut, so that a piece always fits
_STOPS = (".", "!", "?")
_CLOSERS = "\"')]\u201d\u2019"  # may follow a sentence's full stop
_MAX_CHARS_PER_PIECE = 10  # words past 100 characters are one [UNK] piece: characters bound a chunk too


def _size(text: str) -> float:
    """What `text` takes of a chunk's budget."""
    return max(_cost(text), len(text) / _MAX_CHARS_PER_PIECE)


class _Packer:
    """Blocks into chunks; lives for one document.

    The open chunk's body is text[start:end] (after `prefix`, a table's header row, on a chunk that
    continues a table), so what it costs is always measured on slices of the document: the
    separator rows, underlines and rules between blocks are counted too."""

    def __init__(self, text: str, blocks: list[_Block]) -> None:
        self.text = text
        self.blocks = blocks
        self.chunks: list[Chunk] = []
        self.stack: list[int] = []  # block indices of the headings over the current block
        self.paths: dict[tuple[int, ...], tuple[str, int]] = {}
        self.word_sizes: dict[str, float] = {}
        # The open chunk (first == -1: none).
        self.first = -1  # index of its first block
        self.path: list[int] = []
        self.start = self.end = 0
        self.used = 0.0
        self.budget = 0
        self.prefix = ""
        self.has_table = False
        self.sections = 1
        self.lead = ""  # the sentence ending with a colon that introduces the list being packed

    def _path(self, path: list[int]) -> tuple[str, int]:
        """The heading path line and its cost, outer titles dropped to fit HEADING_TOKENS."""
        key = tuple(path)
        if key not in self.paths:
            titles = [" ".join(self.blocks[i].title.split()) for i in path]
            line = " > ".join(titles)
            while len(titles) > 1 and _size(line) > HEADING_TOKENS:
                titles.pop(0)
                line = " > ".join(titles)
            words = line.split(" ")
            while len(words) > 1 and _size(line) > HEADING_TOKENS:
                words.pop()
                line = " ".join(words)
            while _size(line) > HEADING_TOKENS:  # one huge word
                line = line[:len(line) * 3 // 4]
            self.paths[key] = (line, math.ceil(_size(line)))
        return self.paths[key]

    def _fresh_budget(self) -> int:
        """The body budget of a chunk opened now."""
        return CHUNK_TOKENS - self._path(self.stack)[1]

    def _open(self, block: int, start: int, prefix: str = "") -> None:
        self.first, self.path = block, list(self.stack)
        self.start = self.end = start
        self.budget = self._fresh_budget()
        self.prefix = prefix
        self.used = _size(prefix) if prefix else 0.0
        self.has_table = bool(prefix)
        self.sections = 1

    def _extend(self, start: int, end: int, limit: float, size: float | None = None) -> bool:
        """Extend the open chunk's body over text[start:end] (`size` when known) and the gap before
        it, if that fits within `limit`."""
        gap = self.text[self.end:start]
        added = (0.0 if not gap or gap.isspace() else _size(gap)) + \
            (_size(self.text[start:end]) if size is None else size)
        if self.used + added > limit:
            return False
        self.end, self.used = end, self.used + added
        return True

    def _flush(self) -> None:
        if self.first != -1 and self.end > self.start:
            heading = self._path(self.path)[0]
            body = self.text[self.start:self.end]
            if self.prefix:
                body = self.prefix + "\n" + body
            self.chunks.append(Chunk(heading + "\n" + body if heading else body, self.start, self.end, heading))
        self.first = -1

    def run(self) -> list[Chunk]:
        for index, block in enumerate(self.blocks):
            if block.kind == "heading":
                self.lead = ""
                self._heading(index)
            elif block.kind == "table":
                self.lead = ""
                self._table(index)
            else:
                self._paragraph(index)
                if not _LIST_ITEM.match(self.text, block.start):
                    self.lead = self._lead_of(block)
        self._flush()
        return self.chunks

    def _lead_of(self, block: _Block) -> str:
        """The sentence of a paragraph that introduces a list ("Advances are approved by:"), when
        the paragraph ends with one short enough to repeat; else ''."""
        text = self.text[block.start:block.end].rstrip()
        if not text.endswith(":"):
            return ""
        stops = [m.end() for m in re.finditer(r"[.!?][\"')\]]*\s+", text)]
        lead = " ".join(text[stops[-1] if stops else 0:].split())
        return lead if _size(lead) <= LEAD_TOKENS else ""

    def _heading(self, index: int) -> None:
        level = self.blocks[index].level
        while self.stack and self.blocks[self.stack[-1]].level >= level:
            self.stack.pop()
        self.stack.append(index)
        if self.first != -1 and not self._absorbs():
            self._flush()

    def _absorbs(self) -> bool:
        """Whether the open chunk goes on into the section just begun (its heading is on the stack).

        A section of a sentence or two makes a chunk whose vector is mostly its heading path and a
        passage that tells little; joined to its next sibling (or to its own first subsection) it
        is still found by its words, and its title moves into the body, where a reader sees it. The
        chunk's heading path becomes the sections' common parent, so it never names a section that
        only part of the chunk belongs to. Only whole sections join (the tail of a split section
        would repeat), never across more than one level, and never with a table (a table's rows
        keep to their own section).
        """
        if self.used >= SMALL_SECTION_TOKENS or self.has_table:
            return False
        common = 0
        while common < min(len(self.path), len(self.stack)) and self.path[common] == self.stack[common]:
            common += 1
        dropped = self.path[common:]
        if len(dropped) > 1:
            return False
        if dropped:
            # The dropped title must sit right before the body, so that the body can take it in.
            if dropped[0] != self.first - 1 or self.start != self.blocks[self.first].start:
                return False
            title_start = self.blocks[dropped[0]].start
            self.used += _size(self.text[title_start:self.start])
            self.first, self.start = dropped[0], title_start
            self.path = self.path[:common]
            self.budget = CHUNK_TOKENS - self._path(self.path)[1]
        self.sections += 1
        return True

    def _paragraph(self, index: int) -> None:
        block = self.blocks[index]
        size = _size(self.text[block.start:block.end])
        if self.first != -1 and self._extend(block.start, block.end, self.budget, size):
            return
        # A chunk that opens on a list's item repeats the sentence introducing the list, as a table's
        # chunks repeat its header row: "- the Cost Centre Controller" alone answers nothing.
        lead = self.lead if self.lead and _LIST_ITEM.match(self.text, block.start) else ""
        if size + (_size(lead) if lead else 0) <= self._fresh_budget():
            self._flush()
            self._open(index, block.start, lead)
            self.has_table = False
            self._extend(block.start, block.end, math.inf, size)
        else:
            self._split(index, block.start, block.end)

    def _table(self, index: int) -> None:
        rows = self.blocks[index].rows
        header = self.text[rows[0][0]:rows[0][1]]
        # A header that takes more than half a chunk is not worth repeating.
        repeat = header if _size(header) <= self._fresh_budget() / 2 else ""
        if self.first != -1:
            # A table keeps to its own section, and starts where its header and first row fit.
            lead_end = rows[min(1, len(rows) - 1)][1]
            if self.sections > 1 or self.used + _size(self.text[self.end:lead_end]) > self.budget:
                self._flush()
        for number, (start, end) in enumerate(rows):
            size = _size(self.text[start:end])
            if self.first != -1 and self._extend(start, end, self.budget, size):
                self.has_table = True
                continue
            self._flush()
            self._open(index, start, repeat if number else "")
            self.has_table = True
            if not self._extend(start, end, self.budget, size):  # a row longer than a chunk: cut at words
                self._split(index, start, end, repeat if number else "")

    def _split(self, index: int, start: int, end: int, prefix: str = "") -> None:
        """text[start:end], longer than a chunk, in pieces cut at sentence ends (else line ends,
        else words); each piece starts about OVERLAP_TOKENS before the last one ended, at the
        earliest sentence start that close, so a sentence cut at one piece's end is whole in the
        next. The first piece fills the open chunk when it has room; the last one stays open, for
        the section's next blocks."""
        text = self.text
        spans = [(m.start(), m.end()) for m in _WORD.finditer(text, start, end)]
        sizes = []
        for word_start, word_end in spans:
            word = text[word_start:word_end]
            size = self.word_sizes.get(word)
            if size is None:
                size = self.word_sizes[word] = _size(word)
            sizes.append(size)
        # How well a cut after each word falls: 2 at a sentence end, 1 at a line end, else 0.
        strength = [2 if text[a:b].rstrip(_CLOSERS)[-1:] in _STOPS else 1 if b < end and text[b] == "\n" else 0
                    for a, b in spans]
        count = len(spans)
        # Overlap at most a quarter of a piece, so that pieces under a long header still move on.
        overlap = min(OVERLAP_TOKENS, (self._fresh_budget() - (_size(prefix) if prefix else 0)) / 4)
        if self.first != -1 and self.budget - self.used - _size(text[self.end:start]) >= OVERLAP_TOKENS:
            self.used += _size(text[self.end:start])
        else:
            self._flush()
            self._open(index, start, prefix)
        first = 0
        while True:
            room, last, total = self.budget - self.used, first, 0.0
            while last < count and total + sizes[last] <= room:
                total += sizes[last]
                last += 1
            last = max(last, first + 1)
            if last < count:
                last = self._boundary(strength, first + max(1, (last - first) // 2), last)
                total = sum(sizes[first:last])
            self.end, self.used = spans[last - 1][1], self.used + total
            if last >= count:
                return
            self._flush()
            back, reach = last, 0.0
            while back > first + 1 and reach + sizes[back - 1] <= overlap:
                back -= 1
                reach += sizes[back]
            for want in (2, 1):
                starts = [k for k in range(back, last) if strength[k - 1] >= want]
                if starts:
                    back = starts[0]
                    break
            first = max(back, first + 1)
            self._open(index, spans[first][0], prefix)

    @staticmethod
    def _boundary(strength: list[int], low: int, high: int) -> int:
        """The cut in low..high (words before it) after the strongest boundary, the latest of those."""
        for want in (2, 1):
            for cut in range(high, low - 1, -1):
                if strength[cut - 1] >= want:
                    return cut
        return high


def chunk_document(text: str) -> list[Chunk]:
    """The document's chunks, in order: sections packed up to CHUNK_TOKENS, long paragraphs cut
    with overlap, table rows under their header row."""
    return _Packer(text, _blocks(text)).run()


def chunk_text(text: str) -> list[str]:
    """The texts of `chunk_document(text)` (what the ingest service embeds today)."""
    return [chunk.text for chunk in chunk_document(text)]

"""What a generate turn sends a model when it has retrieved passages, and what it says the answer drew on.

The prompt is written for the smallest model of the catalogue (a 0.5B one follows short, concrete
rules and reads best what sits right before the question): passages headed by their file and
section, then the question, then three rules (answer from the passages, quote the exact value,
say so when they do not hold it).

Its size is the time to the first token: the built-in model reads about 230 prompt tokens a second
on two cores, so whole chunks from five passages (over 1,000 tokens) would cost 5 s before a word.
`condense` keeps, from the retrieved chunks, the sentences and table rows closest to the question
(by meaning, from one more embedding call over those units, and by shared words) up to
`[conversations] retrieval_tokens`; a table row always keeps its table's header row. Each kept
piece keeps its span in the document, so citations point at the sentence, not just the chunk. The
prompt then stays inside the model's window with room for the answer, by the engine's own token
count when the cheap bound cannot tell.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

import numpy as np

from inferd.catalogue import Model
from inferd.engines.base import prompt_upper_bound
from inferd.services.retrieval import Passage, query_terms, words_of
from inferd.services.web_search import WebResult

ANSWER_ROOM = 512  # tokens kept free for the answer
# An answer from passages should copy them, not vary: at the engines' usual 0.7 the built-in model
# paraphrased numbers and codes away more often (bench/rag_eval.py).
GROUNDED_TEMPERATURE = 0.2
DEFAULT_RETRIEVAL_TOKENS = 450  # prompt tokens of passages (about 2 s of the built-in model's reading)
CHARS_PER_TOKEN = 3.6  # a cautious English average for the chat models' BPE vocabularies
WORD_WEIGHT = 0.25  # how much the share of the question's words in a piece adds to its cosine
BRIDGE_WEIGHT = 0.2  # what holding all of a bridge name's words adds to a piece's score
BRIDGE_PIECES = 2  # pieces holding a bridge name always read besides the best (its own row, its section)
RANK_DECAY = 0.02  # a piece of a lower-ranked passage needs a little more to be chosen
# Past the best MIN_PIECES, pieces scoring this much below the best are left out even when they
# fit: a small model picks the wrong one of several similar numbers more often the more of them it
# is shown. (A margin alone, without the floor, lost the second fact of chained questions.)
MIN_PIECES = 4
SCORE_MARGIN = 0.15
FOLDED_WEIGHT = 0.5  # a follow-up's folded query counts half as much as the question itself
FOLD_CHARS = 400  # how much of the previous exchange a follow-up's query folds in

GROUNDED_SYSTEM = ("You answer questions about the user's documents. Passages from the documents come with "
                   "each question. Answer from the passages only.")
# With web results among the passages (a `webSearch=true` turn): the same rules, another origin.
WEB_GROUNDED_SYSTEM = ("You answer questions from passages that come with each question: results of a web search "
                       "and, when the user attached documents, passages from them. Answer from the passages only.")
# No request to cite [n], and no numbers on the passages: the 0.5B model then often answers with the
# number alone. Citations are found from the answer's own words instead (`cited`).
RULES = ("Answer the question in one sentence, from the passages above. Quote the exact value as the passage "
         "writes it (a name, a code, or a number with its unit). If the passages do not contain the answer, say "
         "that the documents do not say.")
_MARKER = re.compile(r"\[(\d{1,2})\]")


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
_SEPARATOR_ROW = re.compile(r"\|[\s:|-]*\|")
_BLOCK_START = re.compile(r"(?:[-*•]\s|\d{1,3}[.)]\s|#{1,6}\s)")
_LIST_ITEM = re.compile(r"(?:[-*•]\s|\d{1,3}[.)]\s)")


@dataclass(frozen=True)
class Unit:
    """A sentence, line or table row of a passage's body: its span there, and its table's header row."""

    start: int
    end: int
    header: int | None = None  # index of the header row's unit when this is a table row
    lead: int | None = None  # index of the sentence that introduces the list ("...:") this item is part of


@dataclass(frozen=True)
class Excerpt:
    """What the model reads of one passage: the chosen pieces of its body, and their spans in the document
    (a web result is read whole: no spans)."""

    passage: Passage | WebResult
    text: str
    spans: list[tuple[int, int]] | None  # document offsets of each piece; None for chunks stored before 0007

    def reference(self, index: int) -> dict[str, Any]:
        """The passage's reference (services/retrieval.py) with the spans of what was quoted."""
        return {**self.passage.reference(index), "spans": [list(span) for span in self.spans or ()] or None}


def body_of(passage: Passage) -> str:
    """The passage's body: its text without the heading line."""
    if passage.heading and passage.text.startswith(passage.heading + "\n"):
        return passage.text[len(passage.heading) + 1:]
    return passage.text


def _is_row(line: str) -> bool:
    return line.startswith("|") and line.endswith("|") and len(line) > 1


def units_of(body: str) -> list[Unit]:
    """The body cut into table rows (each knowing its header row) and sentences. A sentence may run
    over a line break (PDF text is broken into layout lines); a blank line, a list item or a
    heading starts a new one. The sentences of a list's items know the sentence ending with a colon
    that introduces the list, as a row knows its header: an item ("- the Cost Centre Controller")
    often means nothing without it ("Cash advances are approved by:")."""
    units: list[Unit] = []
    header: int | None = None
    run: list[int] | None = None  # [start, end] of the prose lines read as one stretch of text
    lead: int | None = None  # the unit introducing the list that the runs read now belong to
    item = False  # whether the open run is a list item

    def flush() -> None:
        nonlocal lead
        if run is None:
            return
        position = run[0]
        for stop in [*(m.start() for m in _SENTENCE_END.finditer(body, run[0], run[1])), run[1]]:
            piece = body[position:stop]
            if piece.strip():
                units.append(Unit(position + len(piece) - len(piece.lstrip()), stop, None, lead if item else None))
            position = stop
            while position < run[1] and body[position].isspace():
                position += 1
        if not item:
            last = units[-1] if units else None
            lead = len(units) - 1 if last is not None and body[last.start:last.end].rstrip().endswith(":") else None

    for line in re.finditer(r"[^\n]+", body):
        stripped = line.group().strip()
        if not stripped:
            continue
        if _is_row(stripped):
            flush()
            run, lead = None, None
            if _SEPARATOR_ROW.fullmatch(stripped):
                continue
            units.append(Unit(line.start(), line.end(), header))
            if header is None:
                header = len(units) - 1
            continue
        header = None
        if run is not None and body[run[1]:line.start()].count("\n") == 1 and not _BLOCK_START.match(stripped):
            run[1] = line.end()
        else:
            flush()
            run = [line.start(), line.end()]
            item = bool(_LIST_ITEM.match(stripped))
    flush()
    return units


def estimate_tokens(text: str) -> int:
    """A cautious count of a chat model's tokens for `text`."""
    return int(len(text) / CHARS_PER_TOKEN) + 1


def stem(word: str) -> str:
    """A light stem, so that "approves" meets "approved" and "simmered" meets "simmer"."""
    word = word.lower().rstrip("'’")
    if word.endswith(("'s", "’s")):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    for suffix in ("ing", "ed", "e"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[:-len(suffix)]
    return word


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _scored_text(body: str, units: list[Unit], index: int) -> str:
    """What a unit is scored by: its text, or for a table row each cell named by its column
    ("Carry-over limit: 8 days; ..."), since a bare row of values says little about a question
    that names the columns; a list item after the sentence that introduces its list."""
    lead = units[index].lead
    shown = _shown_text(body, units, index)
    return shown if lead is None else f"{_shown_text(body, units, lead)} {shown}"


def _shown_text(body: str, units: list[Unit], index: int) -> str:
    """What the model reads of a unit: its text, a table row's cells named by their columns."""
    unit = units[index]
    text = body[unit.start:unit.end]
    if unit.header is None:
        return text
    header = units[unit.header]
    names = _cells(body[header.start:header.end])
    return "; ".join(f"{name}: {value}" if name else value for name, value in zip(names, _cells(text)))


def _render(body: str, units: list[Unit], chosen: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The chosen units in document order, adjacent ones joined as the body joins them, gaps shown as
    an ellipsis, a table row as its cells named by their columns (a small model reads "Price: 7.25
    EUR" right where it misreads the third cell of a row under a header); and their spans in the body."""
    headers = {unit.header for unit in units if unit.header is not None}
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    previous: int | None = None
    for index in sorted(chosen):
        unit = units[index]
        if previous is not None:
            between = body[units[previous].end:unit.start]
            gap = any(skipped not in headers for skipped in range(previous + 1, index))
            parts.append(("\n…\n" if "\n" in between else " … ") if gap else ("\n" if "\n" in between else " "))
        parts.append(_shown_text(body, units, index).strip())
        spans.append((unit.start, unit.end))
        previous = index
    return "".join(parts), spans


Embed = Callable[[list[str]], Awaitable[np.ndarray]]  # texts -> unit vectors (billed by the caller's key)


async def condense(embed: Embed, question: str, passages: Sequence[Passage], budget_tokens: int,
                   bridges: Sequence[str] = ()) -> list[Excerpt]:
    """The pieces of `passages` (best first) most worth the model's reading, within `budget_tokens`:
    each scored by its cosine with the question plus the share of the question's words it holds
    (a table row read with its column names), a little less for a lower-ranked passage; chosen best
    first while they fit (a passage brings its label). A piece holding a bridge name (the second
    hop's, services/bridging.py: the office the first fact names) scores a little more, and the
    best BRIDGE_PIECES of them per name are read first. Passages with nothing chosen are left out."""
    bodies = [body_of(passage) for passage in passages]
    cut = [units_of(body) for body in bodies]
    flat = [(p, u) for p, units in enumerate(cut) for u in range(len(units))]
    if not flat:
        return []
    texts = [_scored_text(bodies[p], cut[p], u) for p, u in flat]
    headers = {(p, unit.header) for p, units in enumerate(cut) for unit in units if unit.header is not None}
    vectors = await embed([question, *texts])
    cosines = vectors[1:] @ vectors[0] if len(vectors) > 1 else np.zeros(0, np.float32)
    words = {stem(term) for term in query_terms(question)}
    pieces = [{stem(term) for term in words_of(text)} for text in texts]
    held = [piece & words for piece in pieces]
    # A question word found in most pieces (the product's name in every one) tells them apart
    # less than a rare one: each word weighs its inverse document frequency among the pieces.
    found_in = Counter(word for found in held for word in found)
    weights = {word: math.log(1 + len(texts) / (1 + found_in[word])) for word in words}
    total = sum(weights.values())

    def word_share(i: int) -> float:
        return sum(weights[word] for word in held[i]) / total if total else 0.0

    names = [{stem(term) for term in query_terms(name)} - words for name in bridges]
    names = [name for name in names if name]
    # A piece holds a bridge name in its text or its section's heading ("Recipe 7: Dark lamb stock").
    sections = [{stem(term) for term in query_terms(passage.heading or "")} for passage in passages]
    stems = [piece | sections[flat[i][0]] for i, piece in enumerate(pieces)]

    def bridge_share(i: int) -> float:
        return max((len(name & stems[i]) / len(name) for name in names), default=0.0)

    # A header row is read with the rows chosen under it, never alone.
    scores = [-np.inf if flat[i] in headers else
              float(cosines[i]) + WORD_WEIGHT * word_share(i) + BRIDGE_WEIGHT * bridge_share(i)
              - RANK_DECAY * flat[i][0]
              for i in range(len(flat))]
    chosen: list[set[int]] = [set() for _ in passages]
    left = budget_tokens
    top, picked = max(scores), 0
    # Besides the best MIN_PIECES (the sentence naming a bridge, usually), the pieces holding each
    # bridge name are read first, however far below the best they score: the second fact (the
    # office's row) shares next to nothing with the question. Of those, the ones holding the
    # question's rarer words: "simmer" for how long the stock simmers, "extension" (a column name)
    # for a phone extension.
    order = sorted(range(len(flat)), key=lambda i: -scores[i])
    leading = set(order[:MIN_PIECES])
    by_words = sorted(order, key=lambda i: -word_share(i))
    forced = [i for name in names for i in [i for i in by_words if name <= stems[i] and np.isfinite(scores[i])
                                             and i not in leading][:BRIDGE_PIECES]]
    for i in dict.fromkeys([*forced, *order]):
        p, u = flat[i]
        if not np.isfinite(scores[i]):
            break  # header rows, last in this order
        if picked >= MIN_PIECES + len(forced) and scores[i] < top - SCORE_MARGIN:
            break  # far weaker pieces only distract
        if u in chosen[p]:
            continue  # read already, as the lead-in of a list item chosen before it
        cost = estimate_tokens(_shown_text(bodies[p], cut[p], u))
        lead = cut[p][u].lead
        if lead is not None and lead not in chosen[p]:
            cost += estimate_tokens(_shown_text(bodies[p], cut[p], lead))  # a list item is read after its lead
        if not chosen[p]:
            cost += estimate_tokens(passages[p].source_name + (passages[p].heading or "")) + 8
        if cost <= left:
            chosen[p].add(u)
            if lead is not None:
                chosen[p].add(lead)
            left -= cost
            picked += 1
    best = [max((scores[i] for i in range(len(flat)) if flat[i][0] == p and flat[i][1] in chosen[p]),
                default=-np.inf) for p in range(len(passages))]
    excerpts = []
    # The passage holding the best piece first: a small model leans on what it reads first.
    for p in sorted((p for p in range(len(passages)) if chosen[p]), key=lambda p: -best[p]):
        text, spans = _render(bodies[p], cut[p], list(chosen[p]))
        excerpts.append(Excerpt(passages[p], text, document_spans(passages[p], bodies[p], spans)))
    return excerpts


def document_spans(passage: Passage, body: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Spans in the body as spans in the document. The body ends with `document[char_start:char_end]`
    (services/ingest/chunk.py); what comes before that (a continued table's repeated header row)
    lies elsewhere in the document and has no span here. None for chunks stored before 0007."""
    if passage.char_start is None or passage.char_end is None:
        return None
    lead = len(body) - (passage.char_end - passage.char_start)
    if lead < 0:
        return None
    return [(passage.char_start + a - lead, passage.char_start + b - lead) for a, b in spans if a >= lead]


def passage_block(index: int, excerpt: Excerpt) -> str:
    """One passage headed by its file and section. Not numbered: shown "[1] (file)", the built-in
    model answered "[1]" instead of the value for 3 of 40 questions, and 27 of 40 were answered
    right without numbers against 22 with them (bench/rag_eval.py, same build). `index` is the
    passage's number in the turn's references."""
    passage = excerpt.passage
    where = f"{passage.source_name}, section \"{passage.heading}\"" if passage.heading else passage.source_name
    return f"From {where}:\n{excerpt.text}"


def grounded_question(question: str, excerpts: Sequence[Excerpt], origin: str = "my documents",
                      rules: str = RULES) -> str:
    """The user message the model answers: the question, the passages, the rules, the question again.
    Asked both before and after the passages, the built-in model read them for the question and
    answered more often right (12 of 14 against 10 of 14 with the question only after them, on
    the same passages of bench/rag_eval.py). `origin` says where the passages come from."""
    blocks = "\n\n".join(passage_block(i + 1, excerpt) for i, excerpt in enumerate(excerpts))
    return f"Question: {question}\n\nPassages from {origin}:\n\n{blocks}\n\n{rules}\n\nQuestion: {question}"


def retrieval_queries(history: Sequence[dict[str, Any]], question: str) -> list[tuple[str, float]]:
    """The question itself and, on a follow-up, the question folded with the exchange before it (so
    "and for contractors?" still finds what the earlier question was about), with their weights."""
    queries = [(question, 1.0)]
    earlier = [row for row in history[:-1] if row["role"] in ("user", "assistant") and not row.get("tool_calls")
               and (row.get("message") or "").strip()]
    if earlier:
        last_user = next((row for row in reversed(earlier) if row["role"] == "user"), None)
        last_reply = next((row for row in reversed(earlier) if row["role"] == "assistant"), None)
        folded = " ".join(str(row["message"])[:FOLD_CHARS] for row in (last_user, last_reply) if row is not None)
        if folded:
            queries.append((f"{folded} {question}", FOLDED_WEIGHT))
    return queries


async def fit_passages(model: Model, count: Callable[[dict[str, Any]], Awaitable[int]],
                       messages: list[dict[str, Any]], question: str, passages: list[Excerpt]) -> list[Excerpt]:
    """The leading passages that fit, with the rest of `messages` (whose last is the question), in
    the model's window with ANSWER_ROOM to spare; none when even one does not fit. `count` gives a
    payload's exact prompt tokens (the engine's), asked only when the cheap bound cannot tell."""
    window = model.config.context_length
    if window is None:
        return passages
    kept = list(passages)
    while kept:
        payload = {"messages": [*messages[:-1], {"role": "user", "content": grounded_question(question, kept)}]}
        if prompt_upper_bound(payload) + ANSWER_ROOM <= window:
            return kept
        if await count(payload) + ANSWER_ROOM <= window:
            return kept
        kept.pop()
    return kept


def _mentions(text: str, term: str) -> bool:
    return re.search(r"(?<![\w])" + re.escape(term) + r"(?![\w])", text, re.IGNORECASE) is not None


def cited(answer: str, question: str, excerpts: Sequence[Excerpt]) -> list[int]:
    """The 1-based numbers of the passages an answer drew on: the ones it names as [n]; failing that,
    the passages that hold most of the answer's own terms (its names, codes and numbers, not the
    question's words); none when the answer shares nothing with them."""
    named = sorted({int(n) for n in _MARKER.findall(answer) if 1 <= int(n) <= len(excerpts)})
    if named:
        return named
    asked = {term.lower() for term in query_terms(question)}
    terms = [term for term in query_terms(answer) if term.lower() not in asked]
    if not terms:
        return []
    hits = [sum(1 for term in terms if _mentions(excerpt.text, term)) for excerpt in excerpts]
    best = max(hits, default=0)
    return [i + 1 for i, count in enumerate(hits) if count == best] if best > 0 else []

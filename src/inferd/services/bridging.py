"""The second hop of a generate turn's retrieval: questions whose answer takes two facts.

"What is the phone extension of the office that approves cash advances?" is answered by two places
of a document: the sentence that names the office ("Cash advances are approved by the Cost Centre
Controller ...") and the contacts table row of that office. The question shares words with the
first and almost none with the second, so one search finds the sentence and misses the row
(bench/rag_eval.py: five of eight such questions). The usual remedy of multi-hop retrieval is a
second search for the *bridge*: the entity the first passage introduces that the question does
not name.

No model is asked for it (a call to the 0.5B model costs seconds before the first token): the
sentences of the first passages that share most of the question's words (rare ones weighing more,
the document's subject not at all) are read for proper names (runs of capitalised words, "Cost
Centre Controller"; a single one when it does not open the sentence, "the Boatman") and references
such as "(recipe 7)". A name the question already holds, a code, a date, or a name found in most
of the passages (the company) is no bridge. Each bridge becomes a query with the question's words its
passage lacks (what is asked of the bridge: "phone extension").

On bench/rag_eval.py's 40 questions the answer reached the model for 39 (34 without the second
hop), with no change for the other kinds; the second hop costs one embedding call and two keyword
searches (about 10 ms here).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from inferd.services import grounding
from inferd.services.grounding import stem
from inferd.services.retrieval import STOPWORDS, Passage, query_terms, words_of

MAX_BRIDGES = 2  # queries of the second hop
TIE = 0.9  # the sentences read for bridges: those sharing about as much of the question as the best
MIN_SHARED = 2  # a sentence sharing fewer of the question's words introduces nothing the question asks for
MAX_PHRASE_WORDS = 5
SUBJECT_SHARE = 0.8  # a question word in the headings of this share of the passages is the subject
MAX_SPREAD = 2  # a bridge name is in at most this many of the first passages (its sentence, its row)
BRIDGE_TOP_K = 1  # passages each bridge adds (the row or paragraph it names; more would crowd the budget)
BRIDGE_SEARCH = 4  # passages searched per bridge for them: the best may be one the first hop has
LEAD = 2  # the first hop's passages that stay ahead of the bridges' (condense favours the earlier)

# A run of capitalised words (names may join with "of", "and", "for" and "&", or with hyphens and
# an apostrophe); or a short reference in parentheses such as "(recipe 7)" or "(see section 4.2)".
_NAME = re.compile(r"(?<![\w'])[A-Z][\w'’-]*(?:\s+(?:(?:of|and|for|&)\s+)?[A-Z][\w'’-]*)*")
_REFERENCE = re.compile(r"\((?:see\s+)?([A-Za-z]+\s+\d+(?:\.\d+)*[A-Za-z]?)\)")
# A sentence ends with its stop: a heading or a list's label introduces no bridge (and shares the
# document's name with every question).
_SENTENCE = re.compile(r".*[.!?][\"')\]]*", re.DOTALL)
MIN_SENTENCE_WORDS = 5
_JOINERS = frozenset({"of", "and", "for", "&"})
# Capitalised but naming no place, body or thing: a date never leads to a second fact.
_CALENDAR = frozenset("""january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday""".split())


@dataclass(frozen=True)
class Bridge:
    """A name the first passages introduce (`name`) and the second-hop query that looks it up."""

    name: str
    query: str


def _words(text: str) -> set[str]:
    """The stems of a text's terms, a hyphenated term also by its parts ("stage-two": stage, two)."""
    stems: set[str] = set()
    for term in words_of(text):  # every word: query_terms keeps a query's first few only
        stems.add(stem(term))
        if "-" in term:
            stems.update(stem(part) for part in term.split("-") if part)
    return stems


def _phrases(sentence: str, asked: set[str]) -> list[tuple[str, bool]]:
    """The names and references (True) of `sentence` the question does not already hold, without its words."""
    found: list[tuple[str, bool]] = []
    opening = next((i for i, char in enumerate(sentence) if char.isalnum()), 0)  # after a list's dash
    for match in _NAME.finditer(sentence):
        words = match.group(0).split()
        # Drop the question's own words and the joiners they leave dangling at either end.
        kept = [word for word in words if stem(word) not in asked and word.lower() not in _CALENDAR]
        while kept and kept[0].lower() in _JOINERS:
            kept.pop(0)
        while kept and kept[-1].lower() in _JOINERS:
            kept.pop()
        if not kept or len(kept) > MAX_PHRASE_WORDS or any(word.lower() not in _JOINERS and stem(word) in asked
                                                           for word in words[:1] + words[-1:]):
            # Nothing left, a clause rather than a name, or the question's own name ("Skyfold
            # Instruments GmbH" when it asks about Skyfold) that a fragment would only blur.
            continue
        if any(char.isdigit() for char in match.group(0)):
            continue  # a code ("AMBER-7731", "HX-220-M") is a value, usually the answer itself
        if len(kept) == 1 and (match.start() == opening or kept[0].lower() in STOPWORDS):
            continue  # a capital that only opens the sentence ("Any", "Work") names nothing
        found.append((" ".join(kept), False))
    for match in _REFERENCE.finditer(sentence):
        found.append((match.group(1), True))
    return found


def bridges_of(question: str, passages: Sequence[Passage], reading: int = 6) -> list[Bridge]:
    """Up to MAX_BRIDGES second-hop queries from the first `reading` passages (best first): each a
    bridge name of the sentences closest to the question, with the question's words their passage
    lacks. A question word counts the less the more sentences and headings of the passages hold it
    (the company's name is in all of them; "maintained" only where the team is named). None when no
    sentence shares at least MIN_SHARED of the question's words."""
    asked = _words(question)
    if not asked:
        return []
    sentences: list[tuple[int, str]] = []  # (passage, sentence)
    found_in: Counter[str] = Counter()
    headed: Counter[str] = Counter()  # question words by the number of passage headings holding them
    for number, passage in enumerate(passages):
        headed.update(_words(passage.heading or "") & asked)
        body = grounding.body_of(passage)
        for unit in grounding.units_of(body):
            sentence = body[unit.start:unit.end]
            found_in.update(_words(sentence) & asked)
            if number < reading and unit.header is None and _SENTENCE.fullmatch(sentence) \
                    and len(sentence.split()) >= MIN_SENTENCE_WORDS:
                sentences.append((number, " ".join(sentence.split())))
    # The document's subject (its title, in the heading path of nearly every passage: "Lintford County
    # Transit: Route 38 Timetable") names no bridge: a sentence sharing only it with the question
    # ("Route 38 is operated by Lintford County Transit from the Cable Street depot") is not about
    # what is asked.
    found_in.update(headed)
    subject = {word for word, count in headed.items() if count >= max(2, SUBJECT_SHARE * len(passages))}
    weight = {word: 1.0 / (1 + found_in[word]) for word in asked}
    scored: list[tuple[float, int, str]] = []
    for number, sentence in sentences:
        shared = (_words(sentence) & asked) - subject
        if len(shared) >= MIN_SHARED:
            scored.append((sum(weight[word] for word in shared), number, sentence))
    if not scored:
        return []
    best = max(score for score, _, _ in scored)
    # (is not a reference, -sentence score, order): a reference such as "(recipe 7)" is the
    # document pointing at the second fact itself, worth more than a name.
    lowered = [" ".join(passage.text.split()).lower() for passage in passages]
    candidates: list[tuple[bool, float, int, Bridge]] = []
    seen: set[str] = set()
    for score, number, sentence in scored:
        # What the question asks of the bridge: its words the whole passage lacks ("phone extension").
        held = _words(passages[number].text)
        lacking = [term for term in query_terms(question) if stem(term) not in held]
        for phrase, reference in _phrases(sentence, asked):
            # Names only from the sentences closest to the question; a reference from any that
            # shares MIN_SHARED of its words (few sentences hold one, and it is seldom idle). A
            # name in most passages is the document's subject (the company), not a bridge.
            if (reference or score >= best * TIE) and phrase.lower() not in seen \
                    and (reference or sum(phrase.lower() in text for text in lowered) <= MAX_SPREAD):
                seen.add(phrase.lower())
                candidates.append((not reference, -score, len(candidates), Bridge(phrase, " ".join([phrase, *lacking]))))
    return [bridge for *_, bridge in sorted(candidates, key=lambda item: item[:3])[:MAX_BRIDGES]]


def joined(first: Sequence[Passage], second: Sequence[Sequence[Passage]]) -> list[Passage]:
    """The first hop's passages with the bridges' new ones after its LEAD best: a bridge passage is
    the second fact, worth more than the first hop's weaker matches."""
    seen = {passage.chunk_id for passage in first}
    extra: list[Passage] = []
    for found in second:
        for passage in [passage for passage in found if passage.chunk_id not in seen][:BRIDGE_TOP_K]:
            seen.add(passage.chunk_id)
            extra.append(passage)
    return [*first[:LEAD], *extra, *first[LEAD:]]

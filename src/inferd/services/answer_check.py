"""Is a grounded answer drawn from its passages? The check behind a generate turn's second try.

A small model with the answer in front of it still misses in a few recognisable ways
(bench/rag_eval.py): it copies a passage's label ("From notes.pdf, section ...") or a heading, it
restates the question or names the thing asked about instead of the value, it writes a number
the passages do not hold (a transposed "4417" for 4471), or it says the documents do not say.
Each of these shows in the answer's own words against the passages', with no model call:

- `declined`: the answer says the documents do not hold the answer;
- `label`: it is only the label a passage was shown under (a label before a value is left out,
  and the value judged);
- `ungrounded`: it holds a number that neither the passages nor the question hold;
- `nothing new`: past the question's words and the passages' file names and headings, it says
  nothing (a heading, or the question turned into a sentence);
- `no number`: the question asks for a quantity ("how many", "how long", a price, a phone
  extension) and the answer holds no digit: often the first fact of a question that takes two
  (the office that approves, not its extension).

An answer with one of these problems is asked again (services/generate.py): first the model
names what to search the documents for next (it has read the first passages, so it can name the
bridge of a question that takes two facts), then it is asked to copy the line of the passages,
with what that search found, that answers the question (QUOTE_RULES). The second answer replaces
the first only when it passes the check and is such a line, as the passages write it (`quoted`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from inferd.services.grounding import Excerpt, stem
from inferd.services.retrieval import words_of

DECLINED, LABEL, UNGROUNDED, NOTHING_NEW, NO_NUMBER = "declined", "label", "ungrounded", "nothing new", "no number"

# "The documents do not say", "the passages don't mention it", "there is no information about".
_DECLINED = re.compile(
    r"\b(?:do(?:es)?\s+not|don'?t|doesn'?t|cannot|can'?t|unable\s+to|no)\b[^.]{0,60}?"
    r"\b(?:say|says|said|mention\w*|contain\w*|state\w*|specif\w*|provide\w*|information|answer|given|include\w*)\b",
    re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_MARKER = re.compile(r"\[\d{1,2}\]")
# Questions whose answer is a quantity: English's own words for asking one, not this or that document's.
_ASKS_QUANTITY = re.compile(
    r"\bhow\s+(?:many|much|long|far|often|old|high|tall|wide|deep|heavy|large|big|fast|hot|cold|warm|low)\b"
    r"|\b(?:what|which)\s+(?:number|percentage|amount|price|cost|fee|rate|temperature|year)\b"
    r"|\b(?:phone|telephone|extension|fax)\s*(?:number|extension)?\b", re.IGNORECASE)
# Words an answer uses to talk about its passages, not to answer.
_ABOUT = frozenset(stem(word) for word in "answer document passage section source according text file".split())

SEARCH_NEXT = ("The passages above may not hold the answer to my question. What should the documents be searched "
               "for next to find it? Reply with a search query of a few words only.")
_QUERY_FIELD = re.compile(r"\"query\"\s*:\s*\"([^\"]+)\"")
_QUERY_LEAD = re.compile(r"^(?:search(?:\s+query)?(?:\s+for)?|query|next)\s*:?\s*", re.IGNORECASE)
MAX_QUERY_CHARS = 200
QUERY_TOKENS = 24  # the reply to SEARCH_NEXT: a few words
SEARCH_TOP_K = 4  # passages searched for the next query: the best may be ones the first search found
NEW_PASSAGES = 2  # new passages the next search adds at most
NEW_TOKENS = 160  # prompt tokens of what it adds (the first search's take DEFAULT_RETRIEVAL_TOKENS)

# The second try is a fresh prompt, not the first answer with a correction: shown its own answer and
# told it was wrong, the built-in model repeated it or answered "No" (bench/rag_eval.py). Asked to
# copy the line of the passages that answers, it has only to find it: a sentence or a table row
# that holds the value is an answer a reader can check against the document.
QUOTE_RULES = ("Copy from the passages above the one sentence or table row that answers the question, exactly as "
               "it is written there, without the passage's heading. If no passage answers it, say that the "
               "documents do not say.")


def _numbers(text: str) -> set[str]:
    """The numbers of a text, spelled one way: "1,850" as "1850", "05" as "5"."""
    found = set()
    for match in _NUMBER.finditer(text):
        value = match.group(0)
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", value):
            value = value.replace(",", "")
        whole, dot, fraction = value.partition(".")
        found.add((whole.lstrip("0") or "0") + dot + fraction)
    return found


def _stems(text: str) -> set[str]:
    """The stems of a text's words and codes, a code also by its parts ("HX-220": hx, 220)."""
    stems: set[str] = set()
    for term in words_of(text):
        stems.add(stem(term))
        stems.update(stem(part) for part in re.split(r"[-_./:]", term) if part)
    return stems


def _labels(excerpts: Sequence[Excerpt]) -> list[str]:
    labels = []
    for excerpt in excerpts:
        passage = excerpt.passage
        labels.append(str(getattr(passage, "source_name", "") or ""))
        labels.append(str(getattr(passage, "heading", "") or ""))
    return [label for label in labels if label]


def problem(answer: str, question: str, excerpts: Sequence[Excerpt]) -> str | None:
    """What is wrong with `answer` to `question` from `excerpts` (DECLINED, LABEL, UNGROUNDED,
    NOTHING_NEW), or None when it gives something the passages hold."""
    text = " ".join(_MARKER.sub(" ", answer).split())  # a citation marker "[2]" is no number of the answer
    if not text:
        return NOTHING_NEW
    if _DECLINED.search(text):
        return DECLINED
    # A copied label ("From notes.pdf, section "Contacts":") is left out: what follows it is judged.
    # The label alone answers nothing.
    for name in {str(getattr(excerpt.passage, "source_name", "") or "") for excerpt in excerpts} - {""}:
        text = re.sub(r"\bFrom\s+" + re.escape(name) + r"(?:,\s*section\s*\"[^\"]*\")?\s*:?", " ", text)
    text = " ".join(text.split())
    if not text:
        return LABEL
    labels = _labels(excerpts)
    seen = " ".join([question, *labels, *(excerpt.text for excerpt in excerpts)])
    numbers = _numbers(text)
    if numbers - _numbers(seen):
        return UNGROUNDED
    if not numbers and _ASKS_QUANTITY.search(question):
        return NO_NUMBER
    if not _stems(text) - _stems(" ".join([question, *labels])) - _ABOUT:
        return NOTHING_NEW
    return None


MIN_QUOTE_WORDS = 3  # a copied line shorter than this is a fragment ("2"), not the sentence or row asked for


def quoted(answer: str, excerpts: Sequence[Excerpt]) -> bool:
    """Whether `answer` is a line the passages hold as written (spacing and case aside), of at
    least MIN_QUOTE_WORDS words: what the second try (QUOTE_RULES) must give to be sent."""
    text = " ".join(_MARKER.sub(" ", answer).split()).strip().rstrip(".").lower()
    if len(text.split()) < MIN_QUOTE_WORDS:
        return False
    return any(text in " ".join(excerpt.text.split()).lower() for excerpt in excerpts)


def search_query(reply: str, question: str) -> str:
    """The search query in the model's reply to SEARCH_NEXT: its first line without quotes or a
    "Search for:" lead (a tool call printed as JSON gives its `query`); the question when the
    reply holds none."""
    field = _QUERY_FIELD.search(reply)
    line = field.group(1) if field else next((line for line in reply.splitlines() if line.strip()), "")
    line = _QUERY_LEAD.sub("", line.strip().strip("`*\"'").strip()).strip().strip("\"'.").strip()
    return line[:MAX_QUERY_CHARS] if words_of(line) else question

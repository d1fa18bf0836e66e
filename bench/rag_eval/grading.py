"""Whether a text states an accepted answer: the one rule the eval's builder and runner share.

    >>> normalise("The limit is **4,500 EUR** per trip.")
    'the limit is 4500 eur per trip.'
    >>> mentions("The limit is 4,500 EUR.", "4500 EUR"), mentions("It costs €4,500", "EUR 4500")
    (True, True)
    >>> mentions("about 450 units", "45"), mentions("version 14.5", "4.5"), mentions("45.5 kg", "45")
    (False, False, False)
    >>> mentions("Extension 4471, ask for the controller", "4471"), mentions("Open at 5:30am", "5:30")
    (True, True)
    >>> mentions("It is qx-4471-b.", "QX-4471-B"), mentions("QX-4471-BC", "QX-4471-B")
    (True, False)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

# Symbols a model may write for a unit the documents spell out: mapped to the spelled form so
# "€145" and "145 EUR" read the same (the order of number and unit is left to the accepted list).
_SYMBOLS = {"€": " eur ", "£": " gbp ", "°": " degrees ", "\u2212": "-"}
_DASHES = re.compile(r"[\u2010-\u2015]")
# Markdown a model wraps answers in; removing it never joins two words.
_MARKUP = re.compile(r"[*_`]+")
# A thousands separator: a comma, thin space or no-break space between a digit and exactly three
# digits that are not followed by another digit ("4,500" but not "1,25" or "4,5000"). Removed
# before NFKC, which would turn those spaces into ordinary ones (never taken as separators).
_THOUSANDS = re.compile(r"(?<=\d)[,\u202f\u00a0\u2009](?=\d{3}(?!\d))")
# Digits glued to a unit ("140g", "600s", "5:30am") read like "140 g".
_GLUED_UNIT = re.compile(r"(?<=\d)(?=[a-z])")


def normalise(text: str) -> str:
    """Lower-case text with one spelling for what differs only in form: unicode compatibility
    forms, dashes, currency and degree signs, thousands separators, markup, runs of whitespace."""
    text = unicodedata.normalize("NFKC", _THOUSANDS.sub("", text)).lower()
    for symbol, word in _SYMBOLS.items():
        text = text.replace(symbol, word)
    text = _DASHES.sub("-", text)
    text = _MARKUP.sub("", text)
    text = _GLUED_UNIT.sub(" ", text)
    return " ".join(text.split())


def _pattern(answer: str) -> re.Pattern[str]:
    """The normalised answer as a whole token run: no letter or digit touching either end, and no
    decimal part continuing a number ("45" is not in "450", "45.5" or "4,5")."""
    return re.compile(r"(?<![a-z0-9])(?<!\d[.,])" + re.escape(normalise(answer)) + r"(?![a-z0-9])(?![.,]\d)")


def mentions(text: str, answer: str) -> bool:
    """Whether the normalised text contains the normalised answer at word boundaries."""
    return _pattern(answer).search(normalise(text)) is not None


def mentions_any(text: str, answers: Iterable[str]) -> bool:
    """Whether the text contains any of the accepted answers."""
    normalised = normalise(text)
    return any(_pattern(answer).search(normalised) for answer in answers)

"""Finding personal data and secrets in text, and redacting them.

Every kind is found by one precompiled, bounded regular expression (its candidates) and a check of
each candidate that reads only the candidate and at most ``CONTEXT`` characters before it (Luhn,
mod-97, the stdlib's ``ipaddress``, ``phonenumbers``' matcher). Bounded patterns are what let
``stream.StreamRedactor`` hold back only ``horizon(kinds)`` characters: a match, or a failed try,
starting at a position never reads further than that from it.

Overlapping matches (a phone number inside a card number, say) merge into one redaction, so no
character of either shows; its label is the one of the match that starts first, the longest of
those when several start there (which is the container in every overlap the kinds here produce).
"""

from __future__ import annotations

import ipaddress
import re
import re._parser as _re_parser  # the stdlib's own pattern parser: the width of a pattern
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import phonenumbers

KINDS: tuple[str, ...] = ("email", "phone", "credit_card", "iban", "us_ssn", "ip_address", "secret")
# The placeholder of a `deny` pattern's match.
DENY = "deny"
PLACEHOLDERS: dict[str, str] = {kind: f"[{kind.upper()}]" for kind in KINDS} | {DENY: "[DENIED]"}

# Characters before a candidate that a check may read (the IPv4 version-word rule reads 12).
CONTEXT = 32
# Characters after a candidate's end that its pattern's lookahead may read (at most 2 here).
LOOKAHEAD = 4

# Regions tried for a phone number written without `+`: the national formats the labelled set
# covers. A number with `+` carries its own country code and parses in any region.
DEFAULT_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR", "IT", "ES", "NL", "IN", "JP", "AU", "BR")


@dataclass(frozen=True, slots=True, order=True)
class Match:
    """One found value: its kind and where it lies (``text[start:end]``)."""

    start: int
    end: int
    kind: str


# --- patterns: every quantifier bounded (see the module docstring) --------------------------------

_EMAIL = (
    r"[\w%+\-](?<![\w.%+\-][\w%+\-])(?:[\w.%+\-']{0,62}[\w%+\-])?@"
    r"(?:[^\W_](?:[\w\-]{0,61}[^\W_])?\.){1,4}(?:[^\W\d_]{2,24}|xn--[a-z0-9\-]{1,20})"
    r"(?![\w\-]|\.[^\W_])"
)
# A run of digits with the separators phone numbers are written with; phonenumbers decides.
_PHONE = r"(?:\+(?<![\w+.\-/]\+)\d|\((?<![\w+.\-/]\()\+?\d|\d(?<![\w+.\-/]\d))[\d ().\-/]{5,22}\d(?![\w\-/]|\.\d)"
_CARD = r"\d(?<![\d\-]\d)(?<!\d \d)(?:[ \-]?\d){12,18}(?![ \-]?\d)"
_IBAN = r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])"
_SSN = r"\d(?<![\d\-]\d)\d{2}([\- ])\d{2}\1\d{4}(?![\d\-])"
_IPV4 = r"\d(?<![\w.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?!\.?[\w])"
_IPV6 = r"[0-9A-Fa-f:](?<![\w:.][0-9A-Fa-f:])(?=[0-9A-Fa-f]{0,3}:)[0-9A-Fa-f:]{1,38}(?:\.\d{1,3}){0,3}(?![\w:])"
_IP = f"{_IPV4}|{_IPV6}"
# Each starts with its literal and looks behind it after (so the engine skips other characters).
_SECRET = "|".join(
    (
        r"sk-(?<![\w\-]sk-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,200}(?![\w\-])",  # OpenAI
        r"A[KS]IA(?<![A-Za-z0-9]A[KS]IA)[0-9A-Z]{16}(?![A-Za-z0-9])",  # AWS access key id
        r"gh[pousr]_(?<![A-Za-z0-9]gh[pousr]_)[A-Za-z0-9]{36}(?![A-Za-z0-9])",  # GitHub token
        r"github_pat_(?<![A-Za-z0-9]github_pat_)[A-Za-z0-9_]{22,255}(?![A-Za-z0-9_])",  # GitHub
        r"xox[abprs]-(?<![A-Za-z0-9]xox[abprs]-)[A-Za-z0-9\-]{10,200}(?![A-Za-z0-9\-])",  # Slack
        r"AIza(?<![A-Za-z0-9]AIza)[0-9A-Za-z_\-]{35}(?![\w\-])",  # Google API key
        r"[sr]k_(?:live|test)_(?<![A-Za-z0-9][sr]k_live_)(?<![A-Za-z0-9][sr]k_test_)[0-9A-Za-z]{16,99}(?![A-Za-z0-9])",
        r"eyJ(?<![\w\-]eyJ)[\w\-]{8,300}\.eyJ[\w\-]{8,700}\.[\w\-]{16,350}(?![\w\-])",  # JWT
        r"-----BEGIN (?:[A-Z0-9]{1,12} ){0,2}PRIVATE KEY-----",  # PEM private key header
    )
)

_PATTERNS: dict[str, re.Pattern[str]] = {
    "email": re.compile(_EMAIL),
    "phone": re.compile(_PHONE),
    "credit_card": re.compile(_CARD),
    "iban": re.compile(_IBAN),
    "us_ssn": re.compile(_SSN),
    "ip_address": re.compile(_IP),
    "secret": re.compile(_SECRET),
}


def pattern_width(pattern: str | re.Pattern[str]) -> int:
    """The most characters a match of ``pattern`` can span (lookarounds not counted).

    Raises ValueError for an unbounded pattern (``+``, ``*``): no holdback could cover it.
    """
    source = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    width = _re_parser.parse(source).getwidth()[1]
    if width >= _re_parser.MAXREPEAT:
        raise ValueError(f"pattern {source!r} has no bounded width")
    return width


# The longest match of each kind, in characters (computed from the patterns themselves):
# email 345 (local part 64, `@`, four labels of 63 and a dot, a top-level label of 24), phone 26,
# credit_card 37 (19 digits and 18 separators), iban 64 (the raw candidate: 4 + 30 characters,
# each after a space; a match is the country's length plus its spaces), us_ssn 11, ip_address 51
# (an IPv6 candidate: 39 characters and a dotted IPv4 tail), secret 1358 (a JWT of 3 + 300, 3 +
# 700 and 350 characters and two dots).
MAX_SPANS: dict[str, int] = {kind: pattern_width(p) for kind, p in _PATTERNS.items()}


def horizon(kinds: Iterable[str], deny_span: int = 0) -> int:
    """Characters after a position that decide whether a match starts there: the longest match
    of ``kinds`` (or of the deny patterns, ``deny_span``) plus the lookahead after it."""
    widths = [MAX_SPANS[kind] for kind in kinds] + [deny_span]
    return max(widths) + LOOKAHEAD if any(widths) else 0


# --- checks: each reads its candidate and at most CONTEXT characters before it --------------------


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a string of digits."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card_network(digits: str) -> str | None:
    """The network whose prefix and length ``digits`` has, if any (issuer tables of 2024)."""
    n = len(digits)
    two, four, six = int(digits[:2]), int(digits[:4]), int(digits[:6])
    if digits[0] == "4" and n in (13, 16, 19):
        return "visa"
    if (51 <= two <= 55 or 2221 <= four <= 2720) and n == 16:
        return "mastercard"
    if two in (34, 37) and n == 15:
        return "amex"
    if (four == 6011 or 644 <= int(digits[:3]) <= 649 or two == 65 or 622126 <= six <= 622925) and 16 <= n <= 19:
        return "discover"
    if 3528 <= four <= 3589 and 16 <= n <= 19:
        return "jcb"
    if (300 <= int(digits[:3]) <= 305 or two in (36, 38, 39)) and 14 <= n <= 19:
        return "diners"
    if two == 62 and 16 <= n <= 19:
        return "unionpay"
    return None


def _check_card(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    digits = re.sub(r"[ \-]", "", text[start:end])
    if _card_network(digits) and luhn_valid(digits):
        yield start, end


# IBAN length by country (the SWIFT IBAN registry).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def iban_valid(compact: str) -> bool:
    """An IBAN without spaces: its country's length and the mod-97 check (ISO 13616)."""
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def _check_iban(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    # The candidate may run on into the next word; take as many characters as the country has.
    length = IBAN_LENGTHS.get(text[start : start + 2])
    if length is None:
        return
    count, index = 0, start
    while index < end and count < length:
        if text[index] != " ":
            count += 1
        index += 1
    candidate = text[start:index]
    if count < length or (index < end and text[index] != " ") or not iban_valid(candidate.replace(" ", "")):
        return
    # Spaces only between groups of four (the printed form), or none at all.
    if " " not in candidate or all(len(group) == 4 for group in candidate.split(" ")[:-1]):
        yield start, index


_VERSION_WORD = re.compile(r"(?:\b(?:version|ver\.?|build|release|firmware|v)\s?)$", re.IGNORECASE)


def _check_ip(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    value = text[start:end]
    if ":" in value:
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            return
        yield start, end
        return
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return
    # A dotted quad right after a version word is a version (`version 1.2.3.4`), not an address.
    if not _VERSION_WORD.search(text, max(0, start - 12), start):
        yield start, end


def _check_ssn(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    # Never issued: area 000, 666 or 900-999, group 00, serial 0000.
    area, group, serial = text[start : start + 3], text[start + 4 : start + 6], text[start + 7 : end]
    if area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000":
        yield start, end


def _check_secret(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    value = text[start:end]
    if value.startswith("sk-"):
        # An OpenAI key is random: letters of both cases and digits (`sk-some-long-slug` is not).
        body = value[3:]
        if not (re.search(r"[a-z]", body) and re.search(r"[A-Z]", body) and re.search(r"\d", body)):
            return
    yield start, end


# What a number written without `+` must not look like, or follow: a date, an SSN, a bare run of
# digits with no trunk `0`, or a word naming another kind of number (`order no.`, `ISBN`, `ID`).
_NOT_A_PHONE = re.compile(
    r"\d{1,2}[./\-]\d{1,2}[./\-]\d{2}|\d{3}[\- ]\d{2}[\- ]\d{4}|[1-9]\d*"
    r"|(?:\d{4}[./\-]\d{1,2}[./\-]\d{1,2}|\d{1,2}[./\-]\d{1,2}[./\-]\d{4})(?!\d).*"  # a date, then a time
)
_NUMBER_WORD = re.compile(
    r"(?:\b(?:order|isbn(?:-1[03])?|id|invoice|inv|ref|reference|case|ticket|account|acct|tracking|po|"
    r"customer|serial|item|sku|part|model|art|article)\.?(?:\s(?:number|no\.?|nr\.?|id))?:?\s{0,2}(?:is\s{1,2}|#\s?)?|#\s?)$",
    re.IGNORECASE,
)


def _check_phone(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    candidate = text[start:end]
    international = candidate.lstrip("(").startswith("+")
    if not international and (
        _NOT_A_PHONE.fullmatch(candidate) or _NUMBER_WORD.search(text, max(0, start - CONTEXT), start)
    ):
        return
    # The matcher is slow (about 0.5 ms a region): run it only in a region where the candidate as
    # a whole parses to a valid number, which is much cheaper to ask; the matcher then applies its
    # VALID leniency (grouping, national prefix) and trims what is around the number.
    for region in ("US",) if international else DEFAULT_REGIONS:
        try:
            if not phonenumbers.is_valid_number(phonenumbers.parse(candidate, region)):
                continue
        except phonenumbers.NumberParseException:
            continue
        leniency = phonenumbers.Leniency.VALID
        spans = [(start + f.start, start + f.end) for f in phonenumbers.PhoneNumberMatcher(candidate, region, leniency)]
        if spans:
            yield from _longest_disjoint(spans)
            return


def _longest_disjoint(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    chosen: list[tuple[int, int]] = []
    for span in sorted(set(spans), key=lambda s: (s[0] - s[1], s[0])):
        if all(span[1] <= other[0] or other[1] <= span[0] for other in chosen):
            chosen.append(span)
    return sorted(chosen)


def _accept(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    yield start, end


Check = Callable[[str, int, int], Iterable[tuple[int, int]]]
_CHECKS: dict[str, Check] = {
    "email": _accept,
    "phone": _check_phone,
    "credit_card": _check_card,
    "iban": _check_iban,
    "us_ssn": _check_ssn,
    "ip_address": _check_ip,
    "secret": _check_secret,
}


class Detector:
    """The patterns and checks of some kinds (and deny patterns), compiled once for many texts."""

    def __init__(self, kinds: Iterable[str], deny: Sequence[str | re.Pattern[str]] = (), deny_span: int | None = None):
        kinds = tuple(dict.fromkeys(kinds))
        unknown = [kind for kind in kinds if kind not in _PATTERNS]
        if unknown:
            raise ValueError(f"unknown PII kinds: {', '.join(unknown)} (known: {', '.join(KINDS)})")
        self.scanners: list[tuple[str, re.Pattern[str], Check]] = [
            (kind, _PATTERNS[kind], _CHECKS[kind]) for kind in kinds
        ]
        deny_patterns = [re.compile(p) if isinstance(p, str) else p for p in deny]
        if deny_span is None:
            deny_span = max((pattern_width(p) for p in deny_patterns), default=0)
        self.scanners += [(DENY, pattern, _accept) for pattern in deny_patterns]
        self.horizon = horizon(kinds, deny_span)

    def scan(self, text: str, pos: int = 0) -> tuple[list[tuple[int, int]], list[Match]]:
        """Every candidate span from ``pos`` on, and the matches among them (unresolved)."""
        raw: list[tuple[int, int]] = []
        matches: list[Match] = []
        for kind, pattern, check in self.scanners:
            for found in pattern.finditer(text, pos):
                start, end = found.span()
                if start == end:
                    continue
                raw.append((start, end))
                matches.extend(Match(s, e, kind) for s, e in check(text, start, end))
        return raw, matches


# Between matches of the same span, the more specific kind names it: a card's or an SSN's digits
# may also be a valid phone number somewhere, never the other way round.
_ORDER = {
    kind: index
    for index, kind in enumerate(("secret", "credit_card", "iban", "us_ssn", "ip_address", "email", DENY, "phone"))
}


def sort_key(match: Match) -> tuple[int, int, int]:
    """First by start, then the longest, then the most specific kind: the first of an overlap
    names it."""
    return match.start, match.start - match.end, _ORDER[match.kind]


def resolve(matches: Iterable[Match]) -> list[Match]:
    """Overlapping matches merged into one, named by its first match (see the module docstring)."""
    merged: list[Match] = []
    for match in sorted(matches, key=sort_key):
        if merged and match.start < merged[-1].end:
            if match.end > merged[-1].end:
                merged[-1] = Match(merged[-1].start, match.end, merged[-1].kind)
            continue
        merged.append(match)
    return merged


def find_pii(text: str, entities: Iterable[str], deny: Sequence[str | re.Pattern[str]] = ()) -> list[Match]:
    """The PII of ``entities`` kinds (and ``deny`` patterns' matches) in ``text``, resolved:
    sorted and disjoint. For many texts build a ``Detector`` once and call ``detect``."""
    return detect(Detector(entities, deny), text)


def detect(detector: Detector, text: str) -> list[Match]:
    """``find_pii`` with a prebuilt detector."""
    return resolve(detector.scan(text)[1])


def render(text: str, ordered: Sequence[Match], cursor: int, stop: int, out: list[str]) -> int:
    """Append ``text[cursor:stop]`` to ``out`` with each match replaced by its placeholder.

    ``ordered`` is sorted by ``sort_key``; only matches starting before ``stop`` count. A match
    that starts before ``cursor`` lies in text already replaced: it only extends that replacement.
    Returns the new cursor: ``stop``, or the end of the last replacement when that is later.
    """
    for match in ordered:
        if match.start >= stop:
            break
        if match.start < cursor:
            if match.end > cursor:
                cursor = match.end
            continue
        if match.start > cursor:
            out.append(text[cursor : match.start])
        out.append(PLACEHOLDERS[match.kind])
        cursor = match.end
    if cursor < stop:
        out.append(text[cursor:stop])
        cursor = stop
    return cursor


def redact(text: str, matches: Iterable[Match]) -> str:
    """``text`` with each match (of ``find_pii``) replaced by ``[EMAIL]``, ``[PHONE]``..."""
    out: list[str] = []
    render(text, sorted(matches, key=sort_key), 0, len(text), out)
    return "".join(out)

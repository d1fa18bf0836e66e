"""PII detection and streaming redaction (issue 33): the labelled set's thresholds per kind, and
that a stream redacted chunk by chunk, in any chunking, equals the whole text redacted, holding
back fewer than `max_span` characters."""

from __future__ import annotations

import importlib.util
import random
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.guardrails.pii import KINDS, MAX_SPANS, Detector, Match, detect, find_pii, redact, resolve
from inferd.guardrails.stream import StreamRedactor

ROOT = Path(__file__).resolve().parents[2]


def _eval_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pii_eval", ROOT / "bench" / "pii_eval.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pii_eval", module)
    spec.loader.exec_module(module)
    return module


PII_EVAL = _eval_module()
RECORDS = PII_EVAL.load()
WITH_ENTITIES = [r["text"] for r in RECORDS if r["entities"]]

MIXED = (
    "Hi, I'm Anna (anna.k+shop@example.com, +49 30 12345678). Refund to DE89 3704 0044 0532 0130 00. "
    "Card 4111-1111-1111-1111 from 415-555-2671, SSN 078-05-1120, host 10.20.30.40 and 2001:db8::1, "
    "key AKIAIOSFODNN7EXAMPLE; ordered 2024-05-17, order 4820-1937-55; mail j.doe@mail.example.co.uk."
)


def test_labelled_set_is_large_and_covers_every_kind() -> None:
    assert len(RECORDS) >= 300
    kinds = {e["kind"] for r in RECORDS for e in r["entities"]}
    assert kinds == set(KINDS)
    assert sum(1 for r in RECORDS if not r["entities"]) >= 80
    assert {r["split"] for r in RECORDS} == {"tune", "heldout", "fresh"}


@pytest.mark.parametrize("split", ["tune", "heldout", "fresh", "all"])
def test_recall_and_precision_per_kind_at_least_98_percent(split: str) -> None:
    part = [r for r in RECORDS if split == "all" or r["split"] == split]
    table = PII_EVAL.score(part)
    low = {k: (row["recall"], row["precision"]) for k, row in table.items()
           if min(row["recall"], row["precision"]) < 0.98}
    assert not low


def test_every_match_fits_its_kinds_max_span() -> None:
    detector = Detector(KINDS)
    for text in WITH_ENTITIES:
        for match in detector.scan(text)[1]:
            assert match.end - match.start <= MAX_SPANS[match.kind]


def test_redact_replaces_each_kind_with_its_placeholder() -> None:
    text = MIXED
    assert redact(text, find_pii(text, KINDS)) == (
        "Hi, I'm Anna ([EMAIL], [PHONE]). Refund to [IBAN]. "
        "Card [CREDIT_CARD] from [PHONE], SSN [US_SSN], host [IP_ADDRESS] and [IP_ADDRESS], "
        "key [SECRET]; ordered 2024-05-17, order 4820-1937-55; mail [EMAIL]."
    )


def test_only_the_chosen_kinds_are_found() -> None:
    assert redact(MIXED, find_pii(MIXED, ["email"])).count("[") == 2
    assert {m.kind for m in find_pii(MIXED, ["credit_card", "us_ssn"])} == {"credit_card", "us_ssn"}
    with pytest.raises(ValueError, match="unknown PII kinds"):
        find_pii(MIXED, ["passport"])


def test_overlaps_merge_and_the_first_longest_names_them() -> None:
    merged = resolve([Match(0, 8, "phone"), Match(0, 19, "credit_card"), Match(15, 25, "email")])
    assert merged == [Match(0, 25, "credit_card")]
    assert redact("0123456789012345678901234567", merged) == "[CREDIT_CARD]567"


def _stream(redactor: StreamRedactor, chunks: list[str]) -> str:
    out = []
    received = 0
    for chunk in chunks:
        out.append(redactor.feed(chunk))
        received += len(chunk)
        assert redactor.held < redactor.max_span
        # What is held is the tail of what was received: the rest was emitted or replaced.
        assert redactor.held <= received
    out.append(redactor.flush())
    assert redactor.held == 0
    return "".join(out)


def _cuts(text: str, pieces: int, rng: random.Random, inside: tuple[int, int] | None = None) -> list[str]:
    """``text`` in ``pieces`` chunks; with ``inside``, every cut falls inside that span."""
    low, high = inside if inside else (1, len(text))
    points = sorted(rng.sample(range(low + 1, high), pieces - 1))
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("value", ["first.last+tag@sub.mail.example.co.uk", "4111 1111 1111 1111", "5555555555554444"])
@pytest.mark.parametrize("pieces", [2, 3, 10])
def test_a_value_cut_across_chunks_is_redacted(value: str, pieces: int) -> None:
    text = f"Write to me, the value is {value} and nothing else."
    whole = redact(text, find_pii(text, KINDS))
    assert value not in whole and "[" in whole
    start = text.index(value)
    rng = random.Random(pieces)
    for _ in range(20):
        chunks = _cuts(text, pieces, rng, inside=(start, start + len(value)))
        assert _stream(StreamRedactor(KINDS), chunks) == whole
        assert _stream(StreamRedactor(["email", "credit_card"]), chunks) == redact(
            text, find_pii(text, ["email", "credit_card"])
        )


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_chunking_of_any_labelled_text_gives_the_whole_redaction(data: st.DataObject) -> None:
    texts = data.draw(st.lists(st.sampled_from(WITH_ENTITIES), min_size=1, max_size=6))
    text = data.draw(st.sampled_from([" ", "\n", ", ", ""])).join(texts)
    kinds = data.draw(st.sampled_from([KINDS, ("email",), ("credit_card", "phone"), ("iban", "us_ssn", "ip_address")]))
    pieces = data.draw(st.integers(1, min(40, len(text))))
    cuts = st.sets(st.integers(1, max(1, len(text) - 1)), min_size=pieces - 1, max_size=pieces - 1)
    points = sorted(data.draw(cuts)) if len(text) > 1 else []
    bounds = [0, *points, len(text)]
    chunks = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    assert _stream(StreamRedactor(kinds), chunks) == redact(text, find_pii(text, kinds))


def test_one_character_chunks_of_a_long_text() -> None:
    text = " ".join([MIXED] * 4)
    assert _stream(StreamRedactor(KINDS), list(text)) == redact(text, find_pii(text, KINDS))


def test_holdback_is_the_chosen_kinds_longest_match() -> None:
    assert StreamRedactor(["credit_card"]).max_span == MAX_SPANS["credit_card"] + 4
    assert StreamRedactor(["us_ssn", "credit_card"]).max_span == MAX_SPANS["credit_card"] + 4
    assert StreamRedactor(KINDS).max_span == max(MAX_SPANS.values()) + 4
    # Text far from any possible match flows through once more than max_span has arrived.
    redactor = StreamRedactor(["credit_card"])
    emitted = redactor.feed("x" * 100)
    assert emitted == "x" * (100 - redactor.max_span + 1)


def test_a_redactor_with_nothing_to_find_holds_nothing_back() -> None:
    # Callers build no redactor for a stream without a guardrail; one with nothing to find is a no-op.
    redactor = StreamRedactor([])
    assert redactor.max_span == 0
    assert redactor.feed("mail a@b.io") == "mail a@b.io" and redactor.held == 0
    assert redactor.flush() == ""


def test_deny_patterns_stream_like_the_whole_text() -> None:
    deny = [r"(?i)project\s{1,3}falcon", r"codename-\d{2,6}"]
    text = "Status of Project  Falcon and codename-4471: see PROJECT falcon notes."
    whole = redact(text, find_pii(text, [], deny=deny))
    assert whole == "Status of [DENIED] and [DENIED]: see [DENIED] notes."
    rng = random.Random(7)
    for pieces in (2, 3, 10):
        assert _stream(StreamRedactor([], deny=deny), _cuts(text, pieces, rng)) == whole
    assert StreamRedactor([], deny=deny).max_span == len("project   falcon") + 4


def test_an_unbounded_deny_pattern_is_refused_without_a_span() -> None:
    with pytest.raises(ValueError, match="no bounded width"):
        StreamRedactor([], deny=[r"secret.*"])
    assert StreamRedactor([], deny=[re.compile(r"secret.*")], deny_span=50).max_span == 54


def test_long_text_is_scanned_in_one_pass() -> None:
    text = (MIXED + " Lorem ipsum dolor sit amet, 12.5 kg, v1.2.3, 2024-05-17. ") * 200
    matches = detect(Detector(KINDS), text)
    assert len(matches) == 200 * 10

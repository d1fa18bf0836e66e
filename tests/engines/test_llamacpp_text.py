"""Token pieces into text: UTF-8 across token boundaries, stop strings across pieces."""

from __future__ import annotations

import pytest

from inferd.engines.llamacpp_text import StopText

TEXT = "Bonjour, ça va? 1 2 3 4 🙂 fin"


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_characters_split_between_pieces_arrive_whole(size: int) -> None:
    text = StopText([])
    out = [text.feed(p) for p in pieces(TEXT.encode(), size)]
    assert "".join(out) + text.flush() == TEXT
    assert all("\ufffd" not in chunk for chunk in out)


@pytest.mark.parametrize("size", [1, 2, 4, 100])
def test_a_stop_string_across_pieces_ends_the_text_before_it(size: int) -> None:
    text = StopText(["3 4", "never"])
    out = ""
    for piece in pieces(TEXT.encode(), size):
        out += text.feed(piece)
        if text.stopped:
            break
    assert text.stopped and out + text.flush() == "Bonjour, ça va? 1 2 "


def test_text_that_only_looks_like_a_stop_string_is_released() -> None:
    text = StopText(["END"])
    assert text.feed(b"the E") == "the "  # "E" may start "END": held
    assert text.feed(b"ND") == "" and text.stopped
    other = StopText(["END"])
    assert other.feed(b"the E") == "the "
    assert other.feed(b"xit") == "Exit"  # it did not: sent on
    assert other.feed(b" EN") == " " and other.flush() == "EN" and not other.stopped

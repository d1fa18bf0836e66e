"""Extraction limits and chunking, on files written here (no server needed for these rules)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from inferd.errors import InvalidRequest
from inferd.services.ingest.chunk import chunk_text
from inferd.services.ingest.extract import MAX_CHARS, MAX_ZIP_TOTAL_BYTES, decode_text, extract_text
from tests.sources import documents


def test_text_past_a_million_characters_is_truncated(tmp_path: Path) -> None:
    path = tmp_path / "long.txt"
    path.write_text("word " * 300_000, encoding="utf-8")  # 1.5 million characters
    extracted = extract_text(path, "long.txt")
    assert extracted.truncated is True and len(extracted.text) == MAX_CHARS
    short = tmp_path / "short.md"
    short.write_text("just a few words", encoding="utf-8")
    assert extract_text(short, "short.md").truncated is False


def test_multibyte_text_truncates_on_characters_not_bytes(tmp_path: Path) -> None:
    path = tmp_path / "greek.txt"
    path.write_text("αβγδε " * 400_000, encoding="utf-8")  # 2.4 M characters, 4.4 MB
    extracted = extract_text(path, "greek.txt")
    assert len(extracted.text) == MAX_CHARS and "\ufffd" not in extracted.text


def test_encodings() -> None:
    assert decode_text("café".encode("utf-16"), cut=False) == "café"
    assert decode_text(b"\xef\xbb\xbfhello", cut=False) == "hello"
    assert decode_text("naïve".encode("cp1252"), cut=False) == "naïve"
    assert decode_text("ok é".encode()[:-1], cut=True) == "ok "  # our own cut splits the last character


def test_archive_limits(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.pptx"
    bomb.write_bytes(documents.zip_bomb("ppt/slides/slide1.xml", inflated_mib=8))
    with pytest.raises(InvalidRequest) as refused:
        extract_text(bomb, "bomb.pptx")
    assert refused.value.code == "unsafe_archive" and "compressed more than" in refused.value.message
    # Declared sizes past the total cap are refused from the directory alone (sizes are patched in
    # the central directory, so nothing that large is ever written or read).
    big = tmp_path / "big.odt"
    with zipfile.ZipFile(big, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("content.xml", "<office:document-content/>")
    data = bytearray(big.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    data[central + 24:central + 28] = (MAX_ZIP_TOTAL_BYTES + 1).to_bytes(4, "little")  # uncompressed size
    big.write_bytes(bytes(data))
    with pytest.raises(InvalidRequest) as too_big:
        extract_text(big, "big.odt")
    assert too_big.value.code == "unsafe_archive" and "expands past" in too_big.value.message


def test_entity_declarations_in_office_xml_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "laughs.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("word/document.xml", '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "ha">]>'
                                              '<w:document xmlns:w="w"><w:p><w:t>&a;</w:t></w:p></w:document>')
    with pytest.raises(InvalidRequest) as refused:
        extract_text(path, "laughs.docx")
    assert refused.value.code == "unreadable_file"


def test_chunks_overlap_and_cover_the_text() -> None:
    sentences = [f"Sentence number {i} talks about topic {i % 7}." for i in range(400)]
    text = " ".join(sentences)
    chunks = chunk_text(text, size=500, overlap=100)
    assert all(len(chunk) <= 500 for chunk in chunks)
    assert len(chunks) >= len(text) // 500
    for sentence in sentences:  # nothing is lost
        assert any(sentence in chunk for chunk in chunks)
    for before, after in zip(chunks, chunks[1:]):  # neighbours share text
        assert after[:30] in before
    assert chunks[0].startswith("Sentence number 0 ") and chunks[-1].endswith("topic 0.")
    assert chunk_text("") == [] and chunk_text("short") == ["short"]


def test_chunks_prefer_paragraph_breaks() -> None:
    text = ("A" * 300 + " end.\n\n") + ("B" * 300 + " end.\n\n") + "C" * 300
    chunks = chunk_text(text, size=700, overlap=50)
    assert chunks[0].endswith("end.") and chunks[0].count("\n\n") == 1

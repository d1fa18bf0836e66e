"""Extraction is bounded in time and memory: a PDF or office document is read in a child process,
so one that keeps the reader busy past `[conversations] extract_timeout_s` is refused with a 400
(`extraction_timeout`) and its reader killed, and one that parses into far more memory than it
weighs never grows the server; through the running server. Ordinary documents still go through."""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Iterator

import pytest

from inferd.config import load_catalogue
from inferd.engines.registry import default_registry
from inferd.errors import ConfigError
from tests.harness import Backend, Server, Upstream, serving
from tests.sources import documents
from tests.sources.conftest import new_user, stored_chunks, upload

TIMEOUT_S = 1
LIMITED_TOML = """
[[models]]
id = "all-minilm-l6-v2"
builtin = true

[conversations]
embedding_model = "all-minilm-l6-v2"
extract_timeout_s = %d
""" % TIMEOUT_S


def slow_pdf(operators: int = 500_000) -> bytes:
    """A one-page PDF of about 2 KB whose compressed content stream shows one character `operators`
    times: pypdf spends seconds (about 40 µs an operator) extracting its text."""
    content = zlib.compress(b"BT /F1 12 Tf 72 720 Td " + b"(a) Tj " * operators + b"ET\n", 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def reset_peak(pid: int) -> None:
    """Bring the process's VmHWM down to its VmRSS, so that a later peak is this test's."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def memory_mib(pid: int, field: str) -> float:
    """A /proc/PID/status memory figure (VmRSS, VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for process {pid}")


def child_pids(pid: int) -> set[int]:
    """The live child processes of `pid`."""
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        children |= {int(c) for c in (task / "children").read_text().split()}
    return children


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """A server that gives each PDF TIMEOUT_S seconds."""
    with serving(tmp_path_factory.mktemp("pdf-limits"), backend, upstream, LIMITED_TOML) as srv:
        yield srv


def test_a_pdf_that_reads_too_long_is_refused_and_its_reader_killed(limited: Server) -> None:
    user = new_user(limited)
    started = time.monotonic()
    response = upload(user, "slow.pdf", slow_pdf())
    took = time.monotonic() - started
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "extraction_timeout" and response.json()["success"] is False
    assert f"within {TIMEOUT_S} seconds" in response.json()["message"]
    assert took < TIMEOUT_S + 10  # the limit, plus starting the reader and the request itself
    assert child_pids(limited.process.pid) == set()  # no reader left running
    assert limited.usage_rows(user.app_key) == []  # nothing was embedded, nothing billed


def test_ordinary_pdfs_are_read_within_the_limit(limited: Server) -> None:
    user = new_user(limited)
    response = upload(user, "report.pdf", documents.pdf_bytes("First line.", "The marker is zebrapdfquartz."))
    assert response.status_code == 201, response.text
    chunks = stored_chunks(limited, response.json()["source"]["id"])
    assert len(chunks) == 1 and "zebrapdfquartz" in chunks[0]["text"]
    broken = upload(user, "broken.pdf", b"%PDF-1.4 nonsense")
    assert broken.status_code == 400 and broken.json()["code"] == "unreadable_file"


def test_an_office_document_that_parses_huge_never_grows_the_server(limited: Server) -> None:
    user = new_user(limited)
    flood = documents.paragraph_flood_docx(32)  # about 2 MB: 32 MiB of XML, millions of elements
    reset_peak(limited.process.pid)
    before = memory_mib(limited.process.pid, "VmRSS")
    started = time.monotonic()
    response = upload(user, "flood.docx", flood)
    took = time.monotonic() - started
    assert response.status_code == 400, response.text
    refusal = response.json()
    assert refusal["success"] is False
    # Parsed in the child: it runs out of time (or memory, or finds no text), never the server.
    assert refusal["code"] in ("extraction_timeout", "unreadable_file", "no_readable_content"), refusal
    grown = memory_mib(limited.process.pid, "VmHWM") - before
    assert grown < 150, f"the server's peak grew {grown:.0f} MiB"  # about 500 MiB when parsed in-process
    assert took < TIMEOUT_S + 10
    assert child_pids(limited.process.pid) == set()
    assert limited.usage_rows(user.app_key) == []


def test_ordinary_office_documents_are_read_in_the_child(limited: Server) -> None:
    user = new_user(limited)
    for name, data in (("notes.docx", documents.docx_bytes("The marker is zebradocxquartz.")),
                       ("deck.pptx", documents.pptx_bytes("Title", "The marker is zebrapptxquartz.")),
                       ("text.odt", documents.odt_bytes("Heading", "The marker is zebraodtquartz."))):
        response = upload(user, name, data)
        assert response.status_code == 201, response.text
        chunks = stored_chunks(limited, response.json()["source"]["id"])
        marker = "zebra" + name.rsplit(".", 1)[1] + "quartz"
        assert any(marker in chunk["text"] for chunk in chunks), chunks


def test_a_document_that_breaks_its_reader_is_a_400(limited: Server) -> None:
    """A reader's exception on a damaged file (here a space count that is not a number) ends in
    the child: the upload gets a 400 in the application envelope, not a 500."""
    user = new_user(limited)
    response = upload(user, "broken.odt", documents.odt_with_bad_spacing())
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "unreadable_file" and "ValueError" in response.json()["message"]


@pytest.mark.parametrize(("value", "fragment"), [("0", "must be positive"), ("true", "expected int or float"),
                                                 ('"1m"', "expected int or float")])
def test_extract_timeout_is_checked(tmp_path: Path, value: str, fragment: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(f"[conversations]\nextract_timeout_s = {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_catalogue(config, default_registry().option_keys())
    message = str(caught.value)
    assert message.startswith(str(config)) and "[conversations], key 'extract_timeout_s'" in message
    assert fragment in message, message

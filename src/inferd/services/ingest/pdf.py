"""PDF text, read by pypdf in a child process with a time limit and a memory ceiling.

A crafted PDF can make a reader work for minutes on one page (millions of text operators in a
small compressed stream) or inflate a stream past the memory of the machine. A thread cannot be
stopped, so the reading happens in a child process: past the time limit it is killed and the
upload is refused with a 400 (`extraction_timeout`); its address space is capped, so a bomb that
slips past pypdf's own decompression limits ends the child, not the server.

The child is this module run as `python -m inferd.services.ingest.pdf PATH MAX_CHARS`: it writes
the text as UTF-8 on stdout and exits 0, or exits with one of the codes below and a reason.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from inferd.errors import InvalidRequest, UnreadableFile

PDF_TIMEOUT_S = 60.0  # per document; `[conversations] extract_timeout_s` overrides
PDF_MEMORY_BYTES = 2 * 1024 * 1024 * 1024  # the child's address space
_UNREADABLE, _ENCRYPTED = 3, 4
# What pypdf raises on damaged files besides its own PyPdfError (it parses untrusted structure).
_READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError,
                NotImplementedError, AssertionError, ZeroDivisionError, MemoryError)


def pdf_text(path: Path, max_chars: int, timeout_s: float = PDF_TIMEOUT_S) -> str:
    """The text of the PDF at `path`, pages joined by blank lines, reading stopped once it holds
    more than `max_chars` characters; 400 when it is unreadable, encrypted or takes too long."""
    # -P: the working directory is not put on the child's import path (nothing there can pose as pypdf).
    command = [sys.executable, "-P", "-m", __name__, str(path), str(max_chars)]
    try:
        child = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:  # run() has killed the child and reaped it
        raise InvalidRequest(f"The PDF could not be read within {timeout_s:g} seconds", code="extraction_timeout",
                             param="file") from None
    if child.returncode == 0:
        return child.stdout.decode("utf-8")
    if child.returncode == _ENCRYPTED:
        raise UnreadableFile("the PDF is encrypted")
    if child.returncode == _UNREADABLE:
        reason = child.stdout.decode("utf-8", "replace").strip() or "damaged"
        raise UnreadableFile(f"not a readable PDF ({reason})")
    # Killed, or out of memory before it could say so.
    raise UnreadableFile("not a readable PDF (reading it took more memory than allowed)")


def _read(path: str, max_chars: int) -> tuple[int, str]:
    """(exit code, what goes to stdout) for the PDF at `path`; runs in the child."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            return _ENCRYPTED, ""
        parts: list[str] = []
        size = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            parts.append(text)
            size += len(text)
            if size > max_chars:
                break
    except (PyPdfError, *_READ_ERRORS) as exc:
        return _UNREADABLE, exc.__class__.__name__
    return 0, "\n\n".join(parts)


def _main() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (PDF_MEMORY_BYTES, PDF_MEMORY_BYTES))
    code, out = _read(sys.argv[1], int(sys.argv[2]))
    # Lone surrogates (broken font maps) cannot be UTF-8: they become U+FFFD, as elsewhere.
    sys.stdout.buffer.write(out.encode("utf-8", "replace"))
    sys.stdout.buffer.flush()
    sys.exit(code)


if __name__ == "__main__":
    _main()

"""PDF text, read by pypdf. Runs only in the capped child process of isolated.py: pypdf parses
untrusted structure, and a crafted PDF can keep it busy for minutes or inflate a stream past the
memory of the machine."""

from __future__ import annotations

from pathlib import Path

from inferd.errors import UnreadableFile

# What pypdf raises on damaged files besides its own PyPdfError (it parses untrusted structure).
_READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError,
                NotImplementedError, AssertionError, ZeroDivisionError, MemoryError)


def pdf_text(path: Path, max_chars: int) -> str:
    """The text of the PDF at `path`, pages joined by blank lines, reading stopped once it holds
    more than `max_chars` characters; 400 when it is unreadable or encrypted."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableFile("the PDF is encrypted")
        parts: list[str] = []
        size = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            parts.append(text)
            size += len(text)
            if size > max_chars:
                break
    except (PyPdfError, *_READ_ERRORS) as exc:
        raise UnreadableFile(f"not a readable PDF ({exc.__class__.__name__})") from None
    return "\n\n".join(parts)

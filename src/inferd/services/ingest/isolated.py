"""Documents that need parsing (PDF, and the zip-based office formats: docx, pptx, odt, odp) are
read in a child process with a time limit and a memory ceiling, never in the server.

A crafted file can make a reader work for minutes (millions of text operators in a small PDF
stream) or build far more in memory than it weighs (a 64 MiB `document.xml` of empty paragraphs
becomes more than a gigabyte of XML elements). A thread cannot be stopped, so the reading happens
in a child process: past the time limit it is killed and the upload is refused with a 400
(`extraction_timeout`); its address space is capped, so a document that inflates past it ends
the child, not the server (400 `unreadable_file`).

The child is this module run as `python -m inferd.services.ingest.isolated EXTENSION PATH
MAX_CHARS`. It writes the normalised text, cut just past MAX_CHARS (so that the parent still
sees the cut), as UTF-8 on stdout and exits 0; or writes a refusal (`{message, code, param}`)
and exits 3.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from inferd.errors import InvalidRequest, UnreadableFile
from inferd.services.ingest.office import docx_text, odf_text, pptx_text
from inferd.services.ingest.pdf import pdf_text
from inferd.services.ingest.tables import normalise

EXTRACT_TIMEOUT_S = 60.0  # per document; `[conversations] extract_timeout_s` overrides
EXTRACT_MEMORY_BYTES = 2 * 1024 * 1024 * 1024  # the child's address space
ISOLATED_EXTENSIONS = frozenset({"pdf", "docx", "pptx", "odt", "odp"})
_REFUSED, _OUT_OF_MEMORY = 3, 4


def _noun(extension: str) -> str:
    return "PDF" if extension == "pdf" else "document"


def read_isolated(extension: str, path: Path, max_chars: int, timeout_s: float = EXTRACT_TIMEOUT_S) -> str:
    """The normalised text of the file at `path` (one of ISOLATED_EXTENSIONS), at most
    `max_chars` + 1 characters; 400 when it is unreadable, refused or takes too long."""
    # -P: the working directory is not put on the child's import path (nothing there can pose as a reader).
    command = [sys.executable, "-P", "-m", __name__, extension, str(path), str(max_chars)]
    try:
        child = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:  # run() has killed the child and reaped it
        raise InvalidRequest(f"The {_noun(extension)} could not be read within {timeout_s:g} seconds",
                             code="extraction_timeout", param="file") from None
    if child.returncode == 0:
        return child.stdout.decode("utf-8")
    if child.returncode == _REFUSED:
        refusal = orjson.loads(child.stdout)
        raise InvalidRequest(refusal["message"], code=refusal["code"], param=refusal["param"])
    # Killed, or out of memory (before it could say so, or after).
    raise UnreadableFile(f"not a readable {_noun(extension)} (reading it took more memory than allowed)")


def _read(extension: str, path: Path, max_chars: int) -> str:
    """The file's text as its reader gives it; runs in the child."""
    if extension == "pdf":
        return pdf_text(path, max_chars)
    readers = {"docx": docx_text, "pptx": pptx_text, "odt": odf_text, "odp": odf_text}
    return readers[extension](path)


def _main() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (EXTRACT_MEMORY_BYTES, EXTRACT_MEMORY_BYTES))
    extension, path, max_chars = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    try:
        text = normalise(_read(extension, path, max_chars))[:max_chars + 1]
    except InvalidRequest as exc:
        sys.stdout.buffer.write(orjson.dumps({"message": exc.message, "code": exc.code, "param": exc.param}))
        sys.exit(_REFUSED)
    except MemoryError:
        sys.exit(_OUT_OF_MEMORY)
    except Exception as exc:  # a reader's bug on a damaged file: the file is unreadable, the server unharmed
        refusal = UnreadableFile(f"not a readable {_noun(extension)} ({exc.__class__.__name__})")
        sys.stdout.buffer.write(orjson.dumps({"message": refusal.message, "code": refusal.code, "param": "file"}))
        sys.exit(_REFUSED)
    # Lone surrogates (broken font maps) cannot be UTF-8: they become U+FFFD, as elsewhere.
    sys.stdout.buffer.write(text.encode("utf-8", "replace"))
    sys.stdout.buffer.flush()
    sys.exit(0)


if __name__ == "__main__":
    _main()

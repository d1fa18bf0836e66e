"""Text into overlapping chunks, cut at paragraph, line, sentence or word boundaries.

The default size keeps a chunk of English prose (about 4.5 characters a token) under the 256
word pieces all-MiniLM-L6-v2 reads, so nothing is silently truncated by the embedder; the
overlap keeps a sentence cut at one chunk's end whole at the next one's start.
"""

from __future__ import annotations

CHUNK_CHARS = 900
OVERLAP_CHARS = 120
_BREAKS = ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ")


def _cut(text: str, start: int, end: int, floor: int) -> int:
    """The best boundary in text[floor:end]: just after the strongest separator found there."""
    for separator in _BREAKS:
        found = text.rfind(separator, floor, end)
        if found != -1:
            return found + len(separator)
    return end


def chunk_text(text: str, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS) -> list[str]:
    """Chunks of at most `size` characters; each starts about `overlap` characters before the last ended."""
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError("chunk size must be positive and the overlap smaller than it")
    chunks: list[str] = []
    start, length = 0, len(text)
    while start < length:
        end = min(start + size, length)
        if end < length:
            end = _cut(text, start, end, start + size // 2)
        piece = text[start:end].strip()
        if piece:
            chunks.append(piece)
        if end >= length:
            break
        # Start the next chunk `overlap` back, at a word boundary, and always move forward.
        back = max(end - overlap, start + 1)
        space = text.find(" ", back, end)
        start = space + 1 if space != -1 and space + 1 < end else back
    return chunks

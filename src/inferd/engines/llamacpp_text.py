"""What a sequence's sampled tokens say: token pieces decoded as UTF-8 across token boundaries, and
stop strings cut out, holding back only the tail that may still grow into one."""

from __future__ import annotations

import codecs


class StopText:
    """Turns token pieces (bytes) into text deltas, ending at the first stop string.

    A character may span tokens, so bytes go through an incremental decoder; a stop string may span
    tokens too, so the text that could be the start of one is held until it is known not to be."""

    __slots__ = ("_stops", "_decoder", "_held", "stopped")

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""
        self.stopped = False

    def feed(self, piece: bytes) -> str:
        """The text that can be sent now; sets `stopped` when a stop string was reached."""
        text = self._decoder.decode(piece)
        if not self._stops:
            return text
        held = self._held + text
        cut = min((i for i in (held.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self._held = ""
            self.stopped = True
            return held[:cut]
        keep = max((n for s in self._stops for n in range(min(len(s) - 1, len(held)), 0, -1)
                    if held.endswith(s[:n])), default=0)
        self._held = held[len(held) - keep:] if keep else ""
        return held[:len(held) - keep]

    def flush(self) -> str:
        """What is left when generation ends (nothing after a stop string)."""
        if self.stopped:
            return ""
        rest = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return rest

"""Token bytes to text that is safe to show: whole UTF-8 characters, stop strings cut out, and the
answer ended where llama-server's FIM limits end it (``n_indent``, ``end_here``)."""

from __future__ import annotations

import codecs
from typing import Sequence

from app.core.speculation.events import Origin, TokenPiece


class TextAssembler:
    """Turns token pieces (bytes) into ``TokenPiece`` events.

    Bytes of a character split over tokens wait for the rest of it. Text that could be the start
    of a stop string waits until it is clearly not one; when a stop string appears, the text ends
    just before it and ``stopped`` becomes true.
    """

    def __init__(self, stop_strings: Sequence[str] = (), n_indent: int = 0):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = tuple(s for s in stop_strings if s)
        self._held = ""            # decoded text not yet emitted (a possible stop-string start)
        self._held_ids: list[int] = []
        self.text = ""             # everything emitted so far
        self.stopped = False
        self.limited = False       # stopped by a limit (n_indent, end_here), not by a stop string
        # llama-server's n_indent: every line after the first whose text starts with fewer spaces or tabs
        # ends the answer there (an editor's completion stays inside the block it was asked for)
        self._n_indent = n_indent
        self._line_indent: int | None = None   # the current line's indentation so far; None: first line,
        #                                        or its text has begun

    def end_here(self) -> None:
        """End the answer after what was emitted (llama-server's t_max_predict_ms: out of time)."""
        self.stopped = self.limited = True

    def push(self, token: int, piece: bytes, origin: Origin) -> TokenPiece | None:
        if self.stopped:
            return None
        self._held += self._decoder.decode(piece)
        self._held_ids.append(token)
        return self._release(origin, final=False)

    def finish(self, origin: Origin = Origin.MAIN) -> TokenPiece | None:
        """Emit whatever is still held (the generation ended)."""
        if self.stopped:
            return None
        self._held += self._decoder.decode(b"", final=True)
        return self._release(origin, final=True)

    def _release(self, origin: Origin, final: bool) -> TokenPiece | None:
        ready, held = self._split_at_stop(self._held, final)
        if ready == "" and held == self._held and not final:
            return None  # everything waits (an incomplete character or a possible stop string)
        ids = tuple(self._held_ids)
        self._held, self._held_ids = held, []
        ready = self._within_indent(ready)
        self.text += ready
        if ready == "" and not ids:
            return None
        return TokenPiece(ready, ids, origin)

    def _within_indent(self, text: str) -> str:
        """``text`` up to the first character of a line indented less than n_indent (llama-server keeps
        that line's spaces and tabs and cuts from its first character); the answer then ends."""
        if self._n_indent <= 0:
            return text
        for i, char in enumerate(text):
            if char == "\n":
                self._line_indent = 0
            elif self._line_indent is None:
                continue
            elif char in " \t":
                self._line_indent += 1
            elif self._line_indent < self._n_indent:
                self.stopped = self.limited = True
                return text[:i]
            else:
                self._line_indent = None
        return text

    def _split_at_stop(self, text: str, final: bool) -> tuple[str, str]:
        """(text to emit now, text to keep holding)."""
        if not self._stops:
            return text, ""
        # earlier text never ends in a stop string's start (that part is held), so search ``text``
        cut = min((i for i in (text.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            return text[:cut], ""
        if final:
            return text, ""
        keep = self._possible_stop_start(text)
        return text[: len(text) - keep], text[len(text) - keep:]

    def _possible_stop_start(self, text: str) -> int:
        """Length of the longest tail of ``text`` that begins some stop string."""
        for n in range(min(len(text), max(map(len, self._stops)) - 1), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self._stops):
                return n
        return 0

"""Tool calls read from a model's answer, as it streams or whole (the formats: app/core/chat/tools.py).

``ToolCallStream`` is fed the answer's text in pieces and gives back what each piece settles:
("content", text), ("reasoning", text) (harmony's analysis messages after the first) and ("call",
ToolCall). Content is given as soon as it cannot be the start of a call; text that may be a marker
split over pieces is held back. A call is given whole, once its closing marker (or the end of its
JSON) has come and its arguments are read as a JSON object; a call that cannot be read (malformed
JSON, no function name) is given as content, the text as the model wrote it. ``parse_tool_calls``
runs the same stream over a whole answer, so that a streamed answer and a whole one always agree.

Content has no whitespace at its start and end (the whitespace around calls), as llama.cpp trims it.
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence

from app.core.chat.generic_tools import GenericReader
from app.core.chat.toolformats import CALL, CONTENT, READERS, REASONING
from app.core.chat.tools import ToolFormat

__all__ = ["CALL", "CONTENT", "REASONING", "ParsedAnswer", "ToolCall", "ToolCallStream", "new_call_id", "parse_tool_calls"]

_ID_CHARS = string.ascii_letters + string.digits
_READERS = READERS | {ToolFormat.GENERIC: GenericReader}   # the template formats' readers, and llama.cpp's generic


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str        # a JSON object, as text


@dataclass(frozen=True)
class ParsedAnswer:
    content: str
    reasoning: str
    calls: list[ToolCall] = field(default_factory=list)


class ToolCallStream:
    """Content, reasoning and tool calls out of an answer fed in pieces (see the module docstring).
    ``tools``: the request's tool definitions (Qwen3-Coder's parameter values are typed by their
    schemas); ``parallel``: False keeps only the first call."""

    def __init__(self, fmt: ToolFormat, tools: Sequence[Mapping] = (), parallel: bool = True):
        self.format = fmt
        self.parallel = parallel
        self.calls: list[ToolCall] = []
        self._reader = _READERS[fmt](tools)
        self._buf = ""
        self._at_opening = False
        self._fresh = True          # nothing but whitespace and calls so far (a bare Llama 3 call may begin)
        self._begun = False         # content has begun
        self._spaces = ""           # whitespace at the content's end, given only if more content follows
        self._part = CONTENT

    def feed(self, text: str) -> list[tuple[str, object]]:
        self._buf += text
        return self._run(final=False)

    def finish(self) -> list[tuple[str, object]]:
        """What is still held: the answer ended."""
        return self._run(final=True)

    def _run(self, final: bool) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        while self._buf:
            if not self._at_opening:
                at, hold = self._reader.opening(self._buf, self._fresh, final)
                if at < 0:
                    cut = len(self._buf) if final else len(self._buf) - hold
                    self._text(self._buf[:cut], self._part, out)
                    self._buf = self._buf[cut:]
                    break
                self._text(self._buf[:at], self._part, out)
                self._buf, self._at_opening = self._buf[at:], True
            read = self._reader.read(self._buf, final)
            if read is None:
                break
            self._buf, self._at_opening = self._buf[max(read.consumed, 1):], False
            for kind, item in read.items:
                if kind == CALL:
                    self._call(*item, out)
                else:
                    self._text(item, kind, out)
            if read.part is not None:
                self._part = read.part
        if final:
            self._spaces = ""
        return _merged(out)

    def _text(self, text: str, part: str, out: list) -> None:
        if part != CONTENT:
            if text:
                out.append((part, text))
            return
        if not self._begun:
            text = text.lstrip()
            if not text:
                return
            self._begun = True
        text = self._spaces + text
        body = text.rstrip()
        self._spaces = text[len(body):]
        if body:
            out.append((CONTENT, body))
            self._fresh = False

    def _call(self, name: str, arguments: dict, given_id: str | None, out: list) -> None:
        self._fresh, self._spaces = True, ""
        if self.calls and not self.parallel:
            return
        call = ToolCall(given_id or new_call_id(self.format), name, json.dumps(arguments, ensure_ascii=False))
        self.calls.append(call)
        out.append((CALL, call))


def parse_tool_calls(fmt: ToolFormat, text: str, tools: Sequence[Mapping] = (), parallel: bool = True) -> ParsedAnswer:
    """A whole answer's content, reasoning and calls: what ``ToolCallStream`` gives for it."""
    stream = ToolCallStream(fmt, tools, parallel)
    items = stream.feed(text) + stream.finish()
    return ParsedAnswer("".join(t for kind, t in items if kind == CONTENT),
                        "".join(t for kind, t in items if kind == REASONING), list(stream.calls))


def new_call_id(fmt: ToolFormat | None = None) -> str:
    """A fresh call id: nine letters and digits for Mistral's templates (they refuse other ids), else
    OpenAI's style."""
    if fmt is ToolFormat.MISTRAL:
        return "".join(secrets.choice(_ID_CHARS) for _ in range(9))
    return "call_" + "".join(secrets.choice(_ID_CHARS) for _ in range(24))


def _merged(items: list) -> list:
    merged: list = []
    for kind, item in items:
        if kind != CALL and merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + item)
        else:
            merged.append((kind, item))
    return merged

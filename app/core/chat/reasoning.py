"""Thinking models: where an answer's reasoning starts and ends, and the answer apart from it.

A thinking model writes its reasoning between markers its chat template knows (Qwen3, QwQ and
DeepSeek R1 ``<think>``...``</think>``; gpt-oss's harmony channels; Gemma 4's ``<|channel>thought``
...``<channel|>``). ``thinking_format`` reads them from the template, ``ReasoningSplitter`` cuts a
streamed answer into its reasoning and answer pieces, ``PartTracker`` says which part (reasoning,
answer, tool call) each streamed token belongs to, for the statistics.

Some markers are control tokens that llama.cpp renders as nothing (harmony's ``<|end|>``, Gemma 4's
channel tokens); ``SpelledVocabulary`` renders them as their text so that the splitter sees them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from collections.abc import Mapping, Sequence

REASONING = "reasoning"
ANSWER = "answer"
TOOL_CALL = "tool_call"
PARTS = (REASONING, ANSWER, TOOL_CALL)


@dataclass(frozen=True)
class ThinkingFormat:
    start: str                # the marker that opens the reasoning, e.g. "<think>"
    end: str                  # the marker that closes it, e.g. "</think>"
    starts_open: bool         # the generation prompt opened the block: the output begins inside reasoning
    switch: str | None        # the template variable that turns thinking on or off ("enable_thinking")


_HARMONY_START = "<|channel|>analysis<|message|>"
# (start, end, a text of the template that shows the format), most specific first
_FORMATS = (
    (_HARMONY_START, "<|end|>", "<|channel|>analysis<|message|>"),
    ("<|channel>thought", "<channel|>", "<|channel>thought"),
    ("<seed:think>", "</seed:think>", "</seed:think>"),
    ("[THINK]", "[/THINK]", "[/THINK]"),
    ("<think>", "</think>", "</think>"),
)
# harmony: ``<|end|>`` is a control token; where it is not spelled, the next message's header ends
# the analysis; the header of the final message (and of a further analysis) is no part of the answer
_EXTRA_ENDS = {_HARMONY_START: ("<|start|>",)}
_HEADERS = {_HARMONY_START: ("<|start|>assistant", "<|channel|>final<|message|>")}
_SWITCHES = ("enable_thinking", "thinking")

# (opening, closing) of a tool call's text: Hermes and Qwen, Gemma 4, gpt-oss (whose <|call|> ends the answer)
TOOL_CALL_MARKERS = (("<tool_call>", "</tool_call>"), ("<|tool_call>", "<tool_call|>"),
                     ("<|channel|>commentary", "<|call|>"))


def thinking_format(template: str | None, generation_prompt_tail: str = "") -> ThinkingFormat | None:
    """The reasoning markers ``template`` uses, or None for a template that does not think.
    ``generation_prompt_tail``: the end of a prompt rendered with this template (at least its
    generation prompt), which tells whether the template opened the reasoning block itself."""
    if not template:
        return None
    for start, end, shown_by in _FORMATS:
        if shown_by in template:
            return ThinkingFormat(start, end, _left_open(generation_prompt_tail, start, end), _switch(template))
    return None


def _left_open(tail: str, start: str, end: str) -> bool:
    """Whether the last reasoning block in ``tail`` is opened and not closed."""
    opened = tail.rfind(start)
    return opened >= 0 and tail.find(end, opened + len(start)) < 0


@lru_cache(maxsize=8)
def _switch(template: str) -> str | None:
    """The boolean variable the template reads to think or not (Qwen3's ``enable_thinking``, Granite's
    and DeepSeek V3.1's ``thinking``); None when it reads neither as a variable of its own."""
    try:
        from jinja2 import Environment, meta

        names = meta.find_undeclared_variables(Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template))
    except Exception:   # a template jinja2 cannot parse: look for the names as words
        names = {name for name in _SWITCHES if re.search(rf"(?<![.\w]){name}\b", template)}
    return next((name for name in _SWITCHES if name in names), None)


def marker_texts(fmt: ThinkingFormat) -> tuple[str, ...]:
    """Every marker text the splitter reads for ``fmt``: the tokens that spell them must render."""
    return (fmt.start, fmt.end, *_EXTRA_ENDS.get(fmt.start, ()), *_HEADERS.get(fmt.start, ()))


def spelled_markers(model, fmt: ThinkingFormat | None) -> dict[int, str]:
    """The control tokens of ``fmt``'s markers that ``model`` (a loaded ``LlamaModel``) renders as
    nothing, with their text: a ``SpelledVocabulary`` renders them."""
    spelled: dict[int, str] = {}
    for text in marker_texts(fmt) if fmt is not None else ():
        for token in model.tokenize(text, add_special=False, parse_special=True):
            if model.is_control(token) and not model.piece(token):
                spelled[token] = model.token_text(token)
    return spelled


def prompt_tail(model, tokens: Sequence[int], n: int = 32) -> str:
    """The text of a prompt's last ``n`` tokens, control tokens spelled: where the generation prompt
    is, for ``thinking_format``."""
    return "".join(model.piece(t).decode("utf-8", "replace") or (model.token_text(t) if model.is_control(t) else "")
                   for t in tokens[-n:])


class ReasoningSplitter:
    """Cuts streamed text into ("reasoning" | "answer", text) pieces.

    A reasoning block opens where the answer has not begun (only whitespace, or a harmony header, so
    far), or at once when the format starts open. Text that may be the start of a marker split over
    pieces is held back. Whitespace around the reasoning and before the answer is dropped, so that
    the pieces joined are what ``split_reasoning`` gives for the whole text.
    """

    def __init__(self, fmt: ThinkingFormat):
        self.fmt = fmt
        self._ends = (fmt.end, *_EXTRA_ENDS.get(fmt.start, ()))
        self._headers = _HEADERS.get(fmt.start, ())
        self.part = REASONING if fmt.starts_open else ANSWER
        self.had_reasoning = False   # some reasoning text was given
        self._held = ""
        self._answer_begun = False
        self._reasoning_begun = False
        self._spaces = ""            # whitespace at the reasoning's end, given only if more reasoning follows

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        buf = self._held + text
        self._held = ""
        while buf:
            buf = self._reasoning(buf, out) if self.part == REASONING else self._answer(buf, out)
        return _merged(out)

    def finish(self) -> list[tuple[str, str]]:
        """What is still held: the output ended, so it is no marker."""
        out: list[tuple[str, str]] = []
        if self._held:
            self._give(self.part, self._held, out)
            self._held = ""
        self._spaces = ""
        return _merged(out)

    def _reasoning(self, buf: str, out: list) -> str:
        cut = min(((i, m) for m in self._ends if (i := buf.find(m)) >= 0), default=None)
        if cut is None:
            keep = partial_marker(buf, self._ends)
            self._give(REASONING, buf[:len(buf) - keep], out)
            self._held = buf[len(buf) - keep:]
            return ""
        at, marker = cut
        self._give(REASONING, buf[:at], out)
        self.part, self._answer_begun, self._spaces = ANSWER, False, ""
        # an extra end (the next harmony header) stays for the answer to read
        return buf[at + len(marker):] if marker == self.fmt.end else buf[at:]

    def _answer(self, buf: str, out: list) -> str:
        if self._answer_begun:
            out.append((ANSWER, buf))
            return ""
        buf = buf.lstrip()
        if not buf:
            return ""
        if buf.startswith(self.fmt.start):
            self.part, self._reasoning_begun = REASONING, False
            return buf[len(self.fmt.start):]
        header = next((h for h in self._headers if buf.startswith(h)), None)
        if header is not None:
            return buf[len(header):]
        if any(m.startswith(buf) for m in (self.fmt.start, *self._headers)):
            self._held = buf   # maybe a marker still arriving
            return ""
        self._answer_begun = True
        out.append((ANSWER, buf))
        return ""

    def _give(self, part: str, text: str, out: list) -> None:
        if part == ANSWER:
            if text:
                out.append((ANSWER, text))
            return
        if not self._reasoning_begun:
            text = text.lstrip()
            if not text:
                return
            self._reasoning_begun = True
            if self.had_reasoning:   # a further block (harmony's analysis after a tool call): a paragraph apart
                text = "\n\n" + text
        text = self._spaces + text
        body = text.rstrip()
        self._spaces = text[len(body):]
        if body:
            self.had_reasoning = True
            out.append((REASONING, body))


def split_reasoning(fmt: ThinkingFormat | None, text: str) -> tuple[str | None, str]:
    """(the reasoning, None when there is none; the answer) of a whole output ``text``."""
    if fmt is None:
        return None, text
    splitter = ReasoningSplitter(fmt)
    pieces = splitter.feed(text) + splitter.finish()
    reasoning = "".join(t for part, t in pieces if part == REASONING)
    return reasoning or None, "".join(t for part, t in pieces if part == ANSWER)


class PartTracker:
    """Which part of the answer streamed tokens belong to: reasoning, answer, or tool-call JSON (text
    between tool-call markers). ``piece`` takes each piece of text with its token count; ``take``
    returns the part with the most tokens since the last ``take`` (a round's part)."""

    def __init__(self, fmt: ThinkingFormat | None, tool_markers=TOOL_CALL_MARKERS):
        self.splitter = ReasoningSplitter(fmt) if fmt is not None else None
        self._markers = tuple(tool_markers)
        self._longest = max((len(m) for pair in self._markers for m in pair), default=0)
        self._answer_tail = ""
        self._in_tool = False
        self._marker_seen = False
        self._counts: dict[str, int] = {}
        self.last = REASONING if fmt is not None and fmt.starts_open else ANSWER

    def piece(self, text: str, n_tokens: int) -> str:
        before = self.splitter.part if self.splitter else ANSWER
        pieces = self.splitter.feed(text) if self.splitter else [(ANSWER, text)]
        after = self.splitter.part if self.splitter else ANSWER
        was_tool, self._marker_seen = self._in_tool, False
        for part, chunk in pieces:
            if part == ANSWER:
                self._read_answer(chunk)
        if REASONING in (before, after) or any(part == REASONING for part, _ in pieces):
            part = REASONING
        elif was_tool or self._in_tool or self._marker_seen:
            part = TOOL_CALL
        else:
            part = ANSWER
        if n_tokens:
            self._counts[part] = self._counts.get(part, 0) + n_tokens
        self.last = part
        return part

    def _read_answer(self, chunk: str) -> None:
        text = self._answer_tail + chunk
        pos = 0
        while True:
            # a closing marker counts only inside a call; an empty one: the call runs to the answer's end
            wanted = [(i, m, opens) for opening, closing in self._markers
                      for m, opens in ((opening, True), (closing, False))
                      if m and (opens or self._in_tool) and (i := text.find(m, pos)) >= 0]
            if not wanted:
                break
            at, marker, opens = min(wanted, key=lambda w: (w[0], -len(w[1])))
            self._in_tool, self._marker_seen = opens, True
            pos = at + len(marker)
        rest = text[pos:]
        self._answer_tail = rest[-(self._longest - 1):] if self._longest > 1 else ""

    def take(self) -> str:
        """The part most of the tokens since the last call belong to (the latest part when none came)."""
        part = max(self._counts, key=self._counts.get) if self._counts else self.last
        self._counts = {}
        return part


class SpelledVocabulary:
    """A vocabulary whose given control tokens render as their own text, not as nothing (the
    reasoning markers that are control tokens, so that the splitter can read them)."""

    def __init__(self, vocab, spelled: Mapping[int, str]):
        self._vocab = vocab
        self._spelled = {token: text.encode("utf-8") for token, text in spelled.items()}

    def is_eog(self, token: int) -> bool:
        return self._vocab.is_eog(token)

    def piece(self, token: int) -> bytes:
        spelled = self._spelled.get(token)
        return spelled if spelled is not None else self._vocab.piece(token)


def partial_marker(text: str, markers: Sequence[str]) -> int:
    """Length of the longest tail of ``text`` that begins one of ``markers`` (text to hold back from a
    stream until the next piece says whether a marker starts there)."""
    for n in range(min(len(text), max(map(len, markers), default=1) - 1), 0, -1):
        if any(m.startswith(text[-n:]) for m in markers):
            return n
    return 0


def _merged(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    merged: list[tuple[str, str]] = []
    for part, text in pieces:
        if not text:
            continue
        if merged and merged[-1][0] == part:
            merged[-1] = (part, merged[-1][1] + text)
        else:
            merged.append((part, text))
    return merged

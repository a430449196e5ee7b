"""Thinking models on the command line: ``--reasoning show|hide`` and ``--think/--no-think`` for
``quickdraft generate``, the reasoning printed apart from the answer (dimmed on a terminal, after a
plain "Thinking: " elsewhere), and each part's numbers for the statistics block."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

DIM, RESET = "\x1b[2m", "\x1b[0m"
PART_NAMES = {"reasoning": "thinking", "answer": "answer", "tool_call": "tool call"}


def add_thinking_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reasoning", choices=("show", "hide"), default="show",
                   help="a thinking model's reasoning: show it apart from the answer (dimmed on a terminal; "
                        "after 'Thinking: ' otherwise), or hide it (default: show)")
    p.add_argument("--think", action=argparse.BooleanOptionalAction, default=None,
                   help="turn a thinking model's thinking on or off through its chat template's switch "
                        "(enable_thinking); default: as the template does")


def thinking_setup(engine, think: bool | None):
    """(the reasoning markers of the answer to come, the chat template variables asking for ``think``,
    a warning when ``think`` was given but cannot be asked for: a remote server's template is its
    own, and a local one may have no switch)."""
    fmt = engine.thinking_format()
    if think is None:
        return fmt, {}, None
    if engine.pair.remote_url is not None:
        return fmt, {}, "--think/--no-think ignored: a remote server's template is its own"
    if fmt is None or fmt.switch is None:
        return fmt, {}, "--think/--no-think ignored: the model's chat template has no thinking switch"
    variables = {fmt.switch: think}
    return engine.thinking_format(variables), variables, None


class ReasoningPrinter:
    """Writes a streamed answer: its reasoning apart (or not at all, ``hide``), then the answer."""

    def __init__(self, fmt, mode: str = "show", out: TextIO | None = None, tty: bool | None = None):
        from app.core.chat.reasoning import ReasoningSplitter

        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.mode = mode
        self._splitter = ReasoningSplitter(fmt) if fmt is not None else None
        self._in_reasoning = False

    def feed(self, text: str) -> None:
        self._write(self._splitter.feed(text) if self._splitter else [("answer", text)])

    def finish(self) -> None:
        if self._splitter is not None:
            self._write(self._splitter.finish())
        self._close_reasoning(ended=False)

    def _write(self, pieces) -> None:
        for part, text in pieces:
            if part == "reasoning":
                if self.mode == "hide":
                    continue
                if not self._in_reasoning:
                    self.out.write(DIM if self.tty else "Thinking: ")
                    self._in_reasoning = True
                self.out.write(text)
            else:
                self._close_reasoning(ended=True)
                self.out.write(text)
        self.out.flush()

    def _close_reasoning(self, ended: bool) -> None:
        if self._in_reasoning:
            self.out.write((RESET if self.tty else "") + ("\n\n" if ended else ""))
            self._in_reasoning = False


def format_parts(summary) -> list[str]:
    """The statistics block's lines for each part of the answer, where there was more than one."""
    if len(summary.by_part) < 2:
        return []
    lines = []
    for part, drafted, accepted, tokens, seconds in summary.by_part:
        speed = tokens / seconds if seconds > 0 else 0.0
        accept = f", accept {100 * accepted / drafted:.1f}% ({accepted}/{drafted})" if drafted else ""
        lines.append(f"{PART_NAMES.get(part, part) + ':':<10}  {tokens} tokens, {speed:.3f} t/s{accept}")
    return lines

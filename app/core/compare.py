"""Speculative decoding against the main model alone, greedy, on one engine: the window's Compare and
the benchmark both measure the speedup this way, so both measure the same thing. Where the two answers
part, ``logit_margin`` says how near a tie the main model was there (a local engine's own logits)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from app.core.engine import Engine
from app.core.errors import QuickdraftError
from app.core.frontdoor import AnswerEngine, GenerationRequest
from app.core.lm import prefill
from app.core.params import DrafterKind, SamplingParams, SpeculationParams
from app.core.speculation.events import Event, Reading, Summary, TokenPiece, run_to_summary


@dataclass(frozen=True)
class CompareResult:
    speculative: Summary
    baseline: Summary           # the main model alone

    @property
    def speedup(self) -> float:
        base = self.baseline.generation_tps
        return self.speculative.generation_tps / base if base > 0 else 0.0

    @property
    def identical(self) -> bool:
        return self.speculative.token_ids == self.baseline.token_ids

    @property
    def first_difference(self) -> int | None:
        """The first position where the answers differ (greedy decoding promises none)."""
        return first_difference(self.baseline.token_ids, self.speculative.token_ids)


@dataclass(frozen=True)
class CompareProgress:
    """How far a compare is: which of its two runs, and in it the prompt read or the tokens written.
    A compare takes minutes on a CPU (each run reads the prompt from an empty cache); it says this,
    not a static line."""

    run: int                    # 1 or 2
    drafter: DrafterKind        # who drafts in this run (NONE: the main model alone)
    generated: int = 0          # tokens written so far
    max_tokens: int = 0
    reading: tuple[int, int] | None = None   # (done, total) of the prompt, while it is read

    def describe(self) -> str:
        who = "main model alone" if self.drafter is DrafterKind.NONE else f"drafter: {self.drafter.label}"
        if self.reading is not None:
            done, total = self.reading
            how_far = f"reading the prompt, {done:,} of {total:,} tokens"
        else:
            how_far = f"{self.generated:,} of at most {self.max_tokens:,} tokens"
        return f"Comparing (greedy), run {self.run} of 2 ({who}): {how_far}…"


def compare_greedy(engine: AnswerEngine, tokens: Sequence[int], drafter: DrafterKind, max_tokens: int,
                   speculation: SpeculationParams = SpeculationParams(),
                   cancel: threading.Event | None = None,
                   progress: Callable[[CompareProgress], None] | None = None) -> CompareResult | None:
    """The main model alone, then with ``drafter`` (prompt lookup when that is "none"), both greedy and
    both from an empty cache. None when ``cancel`` was set. ``progress`` hears how far each run is, at
    each event of the engine's (the caller thins them out)."""
    cancel = cancel or threading.Event()
    kind = DrafterKind.LOOKUP if drafter is DrafterKind.NONE else drafter
    baseline = greedy_run(engine, tokens, DrafterKind.NONE, max_tokens, speculation, cancel,
                          _reporter(progress, 1, DrafterKind.NONE, max_tokens))
    if cancel.is_set():
        return None
    speculative = greedy_run(engine, tokens, kind, max_tokens, speculation, cancel,
                             _reporter(progress, 2, kind, max_tokens))
    if cancel.is_set():
        return None
    return CompareResult(speculative, baseline)


def _reporter(progress: Callable[[CompareProgress], None] | None, run: int, drafter: DrafterKind,
              max_tokens: int) -> Callable[[Event], None] | None:
    """An engine event listener that tells ``progress`` how far run ``run`` is."""
    if progress is None:
        return None
    generated = 0

    def hear(event: Event) -> None:
        nonlocal generated
        if isinstance(event, Reading):
            progress(CompareProgress(run, drafter, generated, max_tokens, (event.done, event.total)))
        elif isinstance(event, TokenPiece):
            generated += len(event.token_ids)
            progress(CompareProgress(run, drafter, generated, max_tokens))

    progress(CompareProgress(run, drafter, 0, max_tokens))
    return hear


def greedy_run(engine: AnswerEngine, tokens: Sequence[int], drafter: DrafterKind, max_tokens: int,
               speculation: SpeculationParams, cancel: threading.Event | None = None,
               on_event: Callable[[Event], None] | None = None) -> Summary:
    """One greedy generation from an empty cache (so no run gets a head start), feeding no suffix index
    (the plain run's answer would be drafted back by the next run); its Summary.
    ``on_event`` hears each event before the Summary."""
    request = GenerationRequest(prompt=list(tokens), sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
                                speculation=speculation, drafter=drafter, cancel=cancel or threading.Event(),
                                empty_cache=True, feed_suffix_index=False)   # a comparison is not a conversation
    summary = run_to_summary(engine.generate(request), on_event)
    if summary.error:
        raise QuickdraftError(summary.error)
    return summary


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class LogitMargin:
    """How sure the main model was at one position: its two best tokens and their logit gap."""

    best: int
    second: int
    margin: float


def logit_margin(engine: Engine, tokens: Sequence[int]) -> LogitMargin:
    """The main model's two best next tokens after ``tokens``, and their logit gap."""
    row = np.asarray(prefill(engine.main, list(tokens)))
    second, best = np.argsort(row)[-2:]
    return LogitMargin(int(best), int(second), float(row[best] - row[second]))

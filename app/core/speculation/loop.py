"""The speculative loop: draft -> verify -> accept -> roll back, yielding events.

Invariant between rounds: the main session's cache holds every accepted token but the newest one
(``context[:-1]``); the newest is decoded at the head of the next verify batch. The drafter keeps
only a prefix of ``context``. So after every round both caches hold accepted tokens only.

Every event is final as it is yielded: a round carries its part of the answer, the Summary its parts'
numbers and the thread counts, so that whoever runs the loop passes the events on untouched.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable, Iterator, Protocol, Sequence

import numpy as np

from app.core.errors import DecodeError, PromptTooLongError, QuickdraftError
from app.core.llama.shared_context import MergedVerify
from app.core.lm import Session, Vocabulary, common_prefix_length, prefill
from app.core.params import SamplingParams
from app.core.speculation.acceptance import SUFFIX
from app.core.speculation.constraint import GrammarConstraint, cut_to_grammar, settle
from app.core.speculation.drafters import Draft, Drafter
from app.core.speculation.events import (Event, Origin, Reading, Round, Started, StopReason, Summary, TokenPiece,
                                         TokenProb)
from app.core.speculation.policy_base import DraftPolicy
from app.core.speculation.sampling import InfillFilter, Sampler, token_prob, top_probability
from app.core.speculation.stats import GenerationStats
from app.core.speculation.text import TextAssembler


class PartsOfText(Protocol):
    """What tells the part of streamed text (app/core/chat/reasoning.py's PartTracker)."""

    def piece(self, text: str, n_tokens: int) -> str: ...

    def take(self) -> str: ...


# Tokens of a long prompt decoded between two Readings: llama.cpp's default batch, so reading in chunks
# costs nothing over reading at once (the session decodes in batches of this size anyway)
READ_CHUNK = 512
# A server's slots take their steps in turn, so a slot reading a prompt holds the others for a chunk: an
# editor's FIM request sent while an agent's 400-token turn was read waited 8.4 s (agent_fim_bench.py, 2
# cores). Slots read in smaller chunks, at a few percent of a CPU's reading speed.
SHARED_READ_CHUNK = 128


def check_prompt_fits(prompt: Sequence[int], n_ctx: int) -> None:
    if len(prompt) >= n_ctx:  # at least one position must stay free for the answer
        raise PromptTooLongError(len(prompt), n_ctx)
    if not prompt:
        raise QuickdraftError("The prompt is empty.")


class SpeculativeGeneration:
    """One generation. Iterate ``run()`` for the events: a Started first, a Summary last, each
    stamped with the seconds since the generation started (one clock, ``time.perf_counter``).
    ``parts`` reads every piece of text, so each round names the part of the answer (reasoning,
    answer, tool call) most of its tokens belong to (None: rounds name none); ``threads`` says, at the
    end, how many threads the main model and the draft decode with (None: 0, not known);
    ``constraint``: a grammar the answer follows (constraint.py; the loop closes it at the end)."""

    def __init__(self, main: Session, vocab: Vocabulary, drafter: Drafter | None, policy: DraftPolicy,
                 sampling: SamplingParams, draft_min: int = 0, cancel: threading.Event | None = None,
                 warnings: Sequence[str] = (), parts: PartsOfText | None = None,
                 threads: Callable[[], tuple[int, int]] | None = None, infill: InfillFilter | None = None,
                 constraint: GrammarConstraint | None = None, read_chunk: int = READ_CHUNK,
                 merged: bool = False):
        self.main = main
        self.read_chunk = read_chunk
        self.merged = merged   # the verify batch is yielded, to be decoded with other slots' (shared_context.py)
        self.constraint = constraint
        self.warnings = tuple(warnings)   # for the Summary: e.g. the chat template was not used
        self.parts = parts
        self.threads = threads
        self.draft_min = draft_min
        self.vocab = vocab
        self.drafter = drafter
        self.policy = policy
        self.params = sampling
        self.sampler = Sampler(sampling, infill)
        self.token_probs: list[TokenProb] = []   # each generated token's, when the request asks (logprobs)
        self._pieced = 0                          # of them, those the text pieces so far carried
        self.cancel = cancel or threading.Event()
        self.stats = GenerationStats()
        self._start = 0.0
        self.text = TextAssembler(sampling.stop, sampling.n_indent)
        self._first_token_s = 0.0
        self.context: list[int] = []
        self.generated: list[int] = []
        self.ended_by_eog = False

    def _read_prompt(self, prompt: Sequence[int]) -> Iterator[Event]:
        """Bring the main model's cache to ``prompt`` (``prefill``), ``read_chunk`` tokens at a time with a
        Reading after each when there is more than one chunk to read; returns the last token's logits."""
        keep = min(common_prefix_length(self.main.cached, prompt), len(prompt) - 1)
        todo = prompt[keep:]
        if len(todo) <= self.read_chunk:
            return prefill(self.main, prompt)
        self.main.truncate(keep)
        for start in range(0, len(todo), self.read_chunk):
            logits = self.main.eval(todo[start:start + self.read_chunk], all_logits=False)
            yield Reading(min(start + self.read_chunk, len(todo)), len(todo), self._now())
        return logits[-1]

    def run(self, prompt: Sequence[int]) -> Iterator[Event]:
        check_prompt_fits(prompt, self.main.n_ctx)
        cached = min(len(prompt) - 1, common_prefix_length(self.main.cached, prompt))
        started = Started(len(prompt), cached, monotonic_start=time.monotonic())
        self._start = time.perf_counter()   # at_s = 0.0: the moment ``started`` names
        self.stats.add(started)
        yield started
        self.context = list(prompt)
        stop: StopReason | None = None
        error: str | None = None
        try:
            logits = yield from self._read_prompt(prompt)
            self.sampler.at(len(prompt))
            first = self.sampler.sample(logits, self.constraint)
            self.token_probs += self._probs([first], [logits])
            settle(self.constraint, 0, first)
            if self.drafter is not None:  # the prompt phase covers both models, as in llama.cpp
                self.drafter.prepare(prompt, self.policy)
            self._first_token_s = self._now()
            self.stats.first_token(self._first_token_s)
            yield from self._emit([first], n_from_draft=0)
            stop = self._stop_reason()
            while stop is None:
                stop = yield from self._round()
        except QuickdraftError as exc:
            stop, error = StopReason.ERROR, str(exc)
            self._forget_caches()
        finally:
            if self.constraint is not None:
                self.constraint.close()
        tail = self.text.finish()
        if tail is not None:
            yield self._record(tail)
        threads, draft_threads = self.threads() if self.threads is not None else (0, 0)
        yield dataclasses.replace(self._summary(stop, error, threads, draft_threads),
                                  token_probs=tuple(self.token_probs[:self._pieced]))

    def _summary(self, stop: StopReason | None, error: str | None, threads: int, draft_threads: int) -> Summary:
        return self.stats.to_summary(generated_tokens=len(self.generated), end_s=self._now(),
                                    stop_reason=stop or StopReason.LENGTH, error=error,
                                    text=self.text.text, token_ids=self.generated, warnings=self.warnings,
                                    policy_learning=self.policy.learning,
                                    cost_rounds_observed=self.policy.cost_rounds_observed,
                                    main_step_s=self.policy.main_step_s(self._middle_context()),
                                    threads=threads, draft_threads=draft_threads)

    def _middle_context(self) -> int:
        """The context halfway through the answer: where a main step's cost stands for the whole answer."""
        return len(self.context) - len(self.generated) // 2

    def _now(self) -> float:
        return time.perf_counter() - self._start

    def _record(self, event: Event) -> Event:
        """Stamp an event on this generation's clock, read a piece's part, and count it."""
        event = dataclasses.replace(event, at_s=self._now())
        if self.params.logprobs is not None and isinstance(event, TokenPiece):
            n = len(event.token_ids)   # a piece's tokens are the next ones generated (text.py)
            event = dataclasses.replace(event, probs=tuple(self.token_probs[self._pieced:self._pieced + n]))
            self._pieced += n
        if self.parts is not None and isinstance(event, TokenPiece):
            self.parts.piece(event.text, len(event.token_ids))
        self.stats.add(event)
        return event

    def _round(self) -> Iterator[Event]:
        if self.cancel.is_set():
            return StopReason.CANCEL
        t0 = time.perf_counter()
        self.sampler.at(len(self.context))   # where this round's first new token goes
        draft, refused_q = cut_to_grammar(self.constraint, self._draft())
        t1 = time.perf_counter()
        rows, decode_s = yield from self._verify_batch([self.context[-1], *draft.tokens])
        t_rows = time.perf_counter()
        accepted, next_token = self.sampler.verify(rows, draft.tokens, draft.q, self.constraint, refused_q)
        probs = self._probs([*draft.tokens[:accepted], next_token], rows)   # before a rollback can decode
        settle(self.constraint, accepted, next_token)
        confidence = [top_probability(row) for row in rows[:accepted + 1]] \
            if self.policy.wants_main_confidence() else []
        # roll back: the main cache keeps the last token and the accepted draft, never the rejected
        self.main.truncate(len(self.context) + accepted)
        t2 = time.perf_counter()
        new_tokens = _cut_after_eog([*draft.tokens[:accepted], next_token], self.vocab)
        self.token_probs += probs[:len(new_tokens)]
        used_drafts = min(accepted, len(new_tokens))
        self.policy.observe(draft, accepted, draft_s=t1 - t0, main_confidence=confidence,
                            verify_s=decode_s + t2 - t_rows, context=len(self.context) - 1)
        yield from self._emit(new_tokens, n_from_draft=used_drafts,
                              drafted=Origin.SUFFIX if draft.sources[:1] == [SUFFIX] else Origin.DRAFT)
        if self.drafter is not None:
            self.drafter.sync(self.context)
        yield self._record(Round(self.stats.rounds, len(draft), used_drafts, t1 - t0, decode_s + t2 - t_rows,
                                 len(self.generated),
                                 learning=self.policy.learning, drafter=draft.sources[0] if draft.sources else "",
                                 part=self.parts.take() if self.parts is not None else ""))
        return self._stop_reason()

    def _verify_batch(self, tokens: list[int]) -> Iterator[object]:
        """The main model's rows for the verify batch and the decode's seconds: decoded here, or, for a
        server slot on a shared context, yielded as a MergedVerify that the slots' scheduler decodes
        with the other slots' batches (its share of that decode is this batch's time)."""
        if not self.merged:
            padded = self._padded(tokens)
            start = time.perf_counter()
            return self.main.eval(padded, all_logits=True)[:len(tokens)], time.perf_counter() - start
        waiting = MergedVerify(self.main, tokens)
        yield waiting
        if waiting.error is not None:
            raise waiting.error
        if waiting.rows is None:
            raise DecodeError("The slots' scheduler resumed a verify batch it did not decode.")
        return waiting.rows, waiting.share_s

    def _padded(self, tokens: list[int]) -> list[int]:
        """The verify batch as decoded: where a bigger batch costs less (the policy's ``verify_size``), the
        last token repeated up to it. Each row depends only on the tokens up to its own (the attention is
        causal), so the padded rows are not read and the rollback drops their positions with the rejected."""
        size = self.policy.verify_size(len(tokens), self.main.n_ctx - len(self.main.cached))
        return tokens + tokens[-1:] * (size - len(tokens))

    def _probs(self, tokens: list[int], rows) -> list[TokenProb]:
        """Each token's log-probability under the main model's row it was chosen at (rows[i] for
        tokens[i]), when the request asks for them."""
        if self.params.logprobs is None:
            return []
        return [token_prob(row, token, self.params.logprobs, self.vocab.piece, self._target(i, row))
                for i, (token, row) in enumerate(zip(tokens, rows))]

    def _target(self, i: int, row) -> np.ndarray | None:
        """With post_sampling_probs, the distribution the i-th token of this round was drawn from (the
        grammar's state is still the round's: ``settle`` comes after)."""
        return self.sampler.target(row, self.constraint, i) if self.params.post_sampling_probs else None

    def _draft(self) -> Draft:
        if self.drafter is None:
            return Draft()
        remaining = self.params.max_tokens - len(self.generated)
        room = self.main.n_ctx - len(self.context)   # free positions once the last token is in
        budget = min(remaining - 1, room - 1)        # the main model always adds one token
        if budget <= 0:
            return Draft()
        draft = self.drafter.draft(self.context, budget, self.policy, self.sampler)
        # A draft ends at its first end-of-generation token: accepted, it ends the answer, so nothing
        # after it could count. A copy of the prompt's last passage runs on through the chat template's
        # end of turn into the next turn's header: copy-1's last round verified 34 tokens, 9 of them usable.
        draft = draft.cut(_through_eog(draft.tokens, self.vocab))
        draft = draft.cut(self.policy.cut(draft))
        if len(draft) < self.draft_min:
            return Draft()  # too short to be worth a batch: the main model decodes alone
        return draft

    def _emit(self, tokens: list[int], n_from_draft: int, drafted: Origin = Origin.DRAFT) -> Iterator[TokenPiece]:
        """Append tokens to the answer and yield their text; an end-of-generation token ends it. The first
        ``n_from_draft`` were drafted: their origin is ``drafted`` (the suffix index's tokens show apart)."""
        for i, token in enumerate(tokens):
            self.context.append(token)
            self.generated.append(token)
            if self.vocab.is_eog(token):
                self.ended_by_eog = True
                return
            if self.text.stopped:
                continue  # generated past a stop string: counted, not shown
            origin = drafted if i < n_from_draft else Origin.MAIN
            piece = self.text.push(token, self.vocab.piece(token), origin)
            if piece is not None:
                yield self._record(piece)
                self._check_time_limit(piece.text)

    def _check_time_limit(self, text: str) -> None:
        """llama-server's t_max_predict_ms: once the answer has taken longer than the limit since its first
        token, it ends at the next line break (an editor wants a suggestion in time, in whole lines)."""
        limit = self.params.max_predict_ms
        if limit and "\n" in text and (self._now() - self._first_token_s) * 1000 > limit:
            self.text.end_here()

    def _stop_reason(self) -> StopReason | None:
        if self.ended_by_eog:
            return StopReason.EOG
        if self.text.stopped:
            return StopReason.LENGTH if self.text.limited else StopReason.STOP_STRING
        if len(self.generated) >= self.params.max_tokens:
            return StopReason.LENGTH
        if len(self.context) >= self.main.n_ctx:
            return StopReason.CONTEXT
        return None

    def _forget_caches(self) -> None:
        self.main.truncate(0)
        if self.drafter is not None:
            self.drafter.sync([])


def _cut_after_eog(tokens: list[int], vocab: Vocabulary) -> list[int]:
    """Tokens after an end-of-generation token in the same round are not part of the answer."""
    return tokens[:_through_eog(tokens, vocab)]


def _through_eog(tokens: Sequence[int], vocab: Vocabulary) -> int:
    """How many of ``tokens`` go up to and including the first end-of-generation token (all: none)."""
    return next((i + 1 for i, token in enumerate(tokens) if vocab.is_eog(token)), len(tokens))

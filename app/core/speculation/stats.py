"""One generation's numbers, computed from its events: the loop builds its Summary with this, and the
window, the server and the CLI read the same numbers from the same events, so they never disagree.

Plain data: every time comes from the events' own stamps (``at_s``, the engine's clock).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

from app.core.speculation import rates
from app.core.speculation.events import Event, Round, Started, StopReason, Summary, TokenPiece

TPS_WINDOW_S = 0.5       # "tokens/sec now" is measured over this much recent generation
ROLLING_ROUNDS = 8       # drafting rounds in the rolling acceptance rate
ALONE_ROUNDS = 3         # rounds without a draft that time a main step well enough for the estimated speedup


@dataclass
class GenerationStats(rates.CountRates):
    prompt_tokens: int = 0
    cached_tokens: int = 0            # prompt tokens reused from the KV cache
    generated_tokens: int = 0
    ttft_s: float | None = None       # when the first token was ready
    generation_s: float = 0.0         # from the first token to the latest
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    drafting_rounds: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    by_drafter: dict[str, list[int]] = field(default_factory=dict)   # drafter -> [drafted, accepted]
    by_part: dict[str, list] = field(default_factory=dict)   # part -> [drafted, accepted, tokens, seconds]
    alone_steps: list[float] = field(default_factory=list)   # verify times of the rounds that drafted nothing
    summary: Summary | None = None    # the final record, once it arrived
    learning: bool = False            # the auto policy is still learning this machine's costs
    _window: deque = field(default_factory=deque, repr=False)                 # (at_s, generated)
    _rolling: deque = field(default_factory=lambda: deque(maxlen=ROLLING_ROUNDS), repr=False)
    _last_round: tuple[float, int] | None = field(default=None, repr=False)   # (at_s, generated_tokens)

    # --- feeding -------------------------------------------------------------------------------

    def add(self, event: Event) -> None:
        if isinstance(event, Round):
            self._add_round(event)
        elif isinstance(event, TokenPiece):
            self._add_piece(event)
        elif isinstance(event, Started):
            self.prompt_tokens, self.cached_tokens = event.prompt_tokens, event.cached_tokens
        elif isinstance(event, Summary):
            self._finish(event)

    def first_token(self, at_s: float) -> None:
        """The first token is ready (the loop knows before its text can be shown)."""
        if self.ttft_s is None:
            self.ttft_s = at_s

    def _token_at(self, at_s: float) -> None:
        self.first_token(at_s)
        self.generation_s = max(self.generation_s, at_s - self.ttft_s)

    def _add_piece(self, piece: TokenPiece) -> None:
        if not piece.token_ids:
            return
        if not self.rounds:  # before the first round only pieces tell how many tokens exist
            self.generated_tokens += len(piece.token_ids)
        self._token_at(piece.at_s)

    def _add_round(self, r: Round) -> None:
        if r.part:
            self._add_to_part(r)
        self._last_round = (r.at_s, r.generated_tokens)
        self.rounds += 1
        self.learning = r.learning
        self.generated_tokens = max(self.generated_tokens, r.generated_tokens)
        self.draft_s += r.draft_s
        self.verify_s += r.verify_s
        self._token_at(r.at_s)
        self._window.append((r.at_s, r.generated_tokens))
        while len(self._window) > 2 and r.at_s - self._window[1][0] >= TPS_WINDOW_S:
            self._window.popleft()
        if r.drafted <= 0:
            self.alone_steps.append(r.verify_s)   # the main model alone, timed in this very answer
            return
        self.drafting_rounds += 1
        self.drafted += r.drafted
        self.accepted += r.accepted
        _add_ones(self.drafted_by_position, r.drafted)
        _add_ones(self.accepted_by_position, r.accepted)
        counts = self.by_drafter.setdefault(r.drafter, [0, 0])
        counts[0] += r.drafted
        counts[1] += r.accepted
        self._rolling.append((r.drafted, r.accepted))

    def _add_to_part(self, r: Round) -> None:
        """A tagged round's counts, its new tokens and its time (since the round before, or the first
        token) go to its part."""
        counts = self.by_part.setdefault(r.part, [0, 0, 0, 0.0])
        if r.drafted > 0:
            counts[0] += r.drafted
            counts[1] += r.accepted
        since_s, before = self._last_round or (self.ttft_s or 0.0, 1)   # the first token came before any round
        counts[2] += max(0, r.generated_tokens - before)
        counts[3] += max(0.0, r.at_s - since_s)

    def part_rows(self) -> tuple[tuple[str, int, int, int, float], ...]:
        """``by_part`` as the Summary keeps it, parts in their usual order."""
        order = {"reasoning": 0, "answer": 1, "tool_call": 2}
        return tuple((part, d, a, n, s) for part, (d, a, n, s)
                     in sorted(self.by_part.items(), key=lambda kv: order.get(kv[0], len(order))))

    def _finish(self, s: Summary) -> None:
        """The summary is the final word (a remote server's counts may differ from what streamed)."""
        self.summary = s
        self.learning = s.policy_learning
        self.prompt_tokens, self.cached_tokens = s.prompt_tokens, s.prompt_tokens - s.prompt_tokens_evaluated
        self.generated_tokens, self.ttft_s, self.generation_s = s.generated_tokens, s.ttft_s, s.generation_s
        self.drafted, self.accepted = s.drafted, s.accepted
        self.rounds, self.drafting_rounds = s.rounds, s.drafting_rounds
        self.draft_s, self.verify_s = s.draft_s, s.verify_s
        self.drafted_by_position = list(s.drafted_by_position)
        self.accepted_by_position = list(s.accepted_by_position)
        self.by_drafter = {name: [d, a] for name, d, a in s.by_drafter}
        if s.by_part:   # a remote server's answer has no parts: keep what was counted
            self.by_part = {part: [d, a, n, sec] for part, d, a, n, sec in s.by_part}

    # --- the final record ------------------------------------------------------------------------

    def to_summary(self, *, generated_tokens: int, end_s: float, stop_reason: StopReason,
                   error: str | None = None, text: str = "", token_ids: Sequence[int] = (),
                   warnings: Sequence[str] = (), policy_learning: bool = False,
                   cost_rounds_observed: int = 0, main_step_s: float | None = None,
                   threads: int = 0, draft_threads: int = 0) -> Summary:
        """The Summary of what was added so far; the loop gives what only it knows (tokens never
        shown, such as an end-of-generation token, when it ended, what its policy learned, what a
        step of the main model alone costs, for the estimated speedup, and the threads each model
        decoded with)."""
        ttft = self.ttft_s or 0.0
        generation_s = max(0.0, end_s - ttft)
        step = self.alone_step_s(main_step_s)
        alone_s = step * (generated_tokens - 1) if step and generated_tokens > 1 else 0.0
        return Summary(
            prompt_tokens=self.prompt_tokens,
            prompt_tokens_evaluated=self.evaluated_tokens,
            generated_tokens=generated_tokens,
            ttft_s=ttft,
            prompt_s=ttft,
            generation_s=generation_s,
            drafted=self.drafted,
            accepted=self.accepted,
            main_tokens=generated_tokens - self.accepted,
            rounds=self.rounds,
            drafting_rounds=self.drafting_rounds,
            draft_s=self.draft_s,
            verify_s=self.verify_s,
            drafted_by_position=tuple(self.drafted_by_position),
            accepted_by_position=tuple(self.accepted_by_position),
            stop_reason=stop_reason,
            error=error,
            text=text,
            token_ids=tuple(token_ids),
            at_s=end_s,
            warnings=tuple(warnings),
            by_drafter=tuple((str(name), d, a) for name, (d, a) in self.by_drafter.items()),
            by_part=self.part_rows(),
            policy_learning=policy_learning,
            cost_rounds_observed=cost_rounds_observed,
            estimated_speedup=rates.ratio(alone_s, generation_s) if alone_s and generation_s > 0 else None,
            threads=threads,
            draft_threads=draft_threads,
        )

    # --- reading -------------------------------------------------------------------------------

    def alone_step_s(self, learned: float | None) -> float | None:
        """A step of the main model alone, for the estimated speedup: timed in this answer (the median of
        its rounds that drafted nothing, once there are ALONE_ROUNDS of them), else what the cost model
        learned (``learned``; None: unknown)."""
        if len(self.alone_steps) >= ALONE_ROUNDS:
            return statistics.median(self.alone_steps)
        return learned

    @property
    def evaluated_tokens(self) -> int:
        """Prompt tokens decoded (the rest came from the cache)."""
        return self.prompt_tokens - self.cached_tokens

    @property
    def main_tokens(self) -> int:
        """Tokens the main model produced itself: generated = accepted + main tokens."""
        return self.generated_tokens - self.accepted

    @property
    def prompt_tps(self) -> float:
        return rates.per_second(self.evaluated_tokens, self.ttft_s or 0.0)

    @property
    def tps_now(self) -> float:
        """Tokens per second over the latest rounds (about TPS_WINDOW_S of them)."""
        if len(self._window) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self._window[0], self._window[-1]
        return rates.per_second(n1 - n0, t1 - t0)

    @property
    def rolling_acceptance_rate(self) -> float:
        """Acceptance over the latest ROLLING_ROUNDS rounds that drafted."""
        return rates.ratio(sum(a for _, a in self._rolling), sum(d for d, _ in self._rolling))


def _add_ones(by_position: list[int], n: int) -> None:
    """Count one more at each of the first ``n`` positions."""
    by_position.extend([0] * (n - len(by_position)))
    for i in range(n):
        by_position[i] += 1

"""The engine's event stream: what ``Engine.generate()`` yields.

The CLI, the GUI, the benchmark and the tests all consume these same small frozen values. Every
event carries ``at_s``: when it happened, in seconds since the generation started, on the engine's
one clock, so every rate computed from events (app/core/speculation/stats.py) is measured on that clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Generator, Iterable

from app.core.errors import QuickdraftError
from app.core.speculation import rates


class Origin(str, Enum):
    """Where a token came from."""

    DRAFT = "draft"  # a drafted token the main model accepted
    SUFFIX = "suffix"  # a token drafted from the suffix index (past answers and prompts) the main model accepted
    MAIN = "main"    # the main model's own token: a correction after a rejection, or a bonus


class StopReason(str, Enum):
    LENGTH = "length"          # max tokens reached
    EOG = "eog"                # an end-of-generation token
    STOP_STRING = "stop_string"
    CONTEXT = "context"        # the context window is full
    CANCEL = "cancel"
    ERROR = "error"


@dataclass(frozen=True)
class Started:
    """The first event: the prompt fits and decoding begins. ``cached_tokens`` of the prompt are reused
    from the KV cache (not decoded again). ``monotonic_start`` is ``time.monotonic()`` at that moment,
    so a caller in the same process can place the stamps on its own clock."""

    prompt_tokens: int
    cached_tokens: int
    monotonic_start: float = 0.0
    at_s: float = 0.0

    @property
    def evaluated_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True)
class Reading:
    """The prompt is being read: ``done`` of the ``total`` tokens past the cached prefix are decoded.
    Sent after each chunk of a prompt longer than one chunk (a long conversation read again can take
    a minute on a CPU, and nothing else would show)."""

    done: int
    total: int
    at_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.done / self.at_s if self.at_s > 0 else 0.0


@dataclass(frozen=True)
class TokenProb:
    """The main model's log-probability of an answer token at its position, and its ``top`` likeliest
    tokens there (id, bytes, log-probability), best first: from its raw distribution (temperature 1, no
    filter or bias), the same whether the token was drafted or not (SamplingParams.logprobs)."""

    token: int
    piece: bytes
    logprob: float
    top: tuple[tuple[int, bytes, float], ...] = ()


def token_prob_dict(p: TokenProb) -> dict:
    """A token's log-probability for JSON: its id, text (U+FFFD for a split character's byte) and
    alternatives."""
    return {"token": p.token, "text": p.piece.decode("utf-8", errors="replace"), "logprob": p.logprob,
            "top": [{"token": t, "text": b.decode("utf-8", errors="replace"), "logprob": lp} for t, b, lp in p.top]}


@dataclass(frozen=True)
class TokenPiece:
    """Text ready to show. ``text`` holds whole characters only (bytes of a character split across
    tokens are held back until it is complete), so it may be empty while ``token_ids`` is not."""

    text: str
    token_ids: tuple[int, ...]
    origin: Origin
    at_s: float = 0.0
    probs: tuple[TokenProb, ...] = ()   # one per token id, when the request asked for log-probabilities


@dataclass(frozen=True)
class Round:
    """One speculative round: drafted n tokens, the main model accepted k of them, then added one."""

    index: int
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    generated_tokens: int   # tokens generated so far, this round included
    at_s: float = 0.0      # when the round ended, since generation started (prompt processing included)
    learning: bool = False  # the policy was still learning this machine's costs after this round
    drafter: str = ""       # who drafted this round's tokens (a DrafterKind value); "" when none were drafted
    part: str = ""          # the part of the answer its tokens belong to: "reasoning", "answer", "tool_call"


@dataclass(frozen=True)
class Summary(rates.CountRates):
    prompt_tokens: int            # tokens in the prompt
    prompt_tokens_evaluated: int  # of those, how many were decoded (the rest came from the cache)
    generated_tokens: int
    ttft_s: float                 # time to first token
    prompt_s: float
    generation_s: float           # from the first token to the end
    drafted: int
    accepted: int
    main_tokens: int              # tokens the main model produced itself (corrections and bonuses)
    rounds: int
    drafting_rounds: int          # rounds that drafted at least one token
    draft_s: float
    verify_s: float
    accepted_by_position: tuple[int, ...] = ()
    drafted_by_position: tuple[int, ...] = ()
    stop_reason: StopReason = StopReason.LENGTH
    error: str | None = None
    text: str = ""
    token_ids: tuple[int, ...] = field(default=(), repr=False)
    warnings: tuple[str, ...] = ()   # for the user: e.g. the chat template was too costly and not used
    token_probs: tuple[TokenProb, ...] = field(default=(), repr=False)   # the shown tokens', when asked
    speculation_reported: bool = True  # False: a remote server said nothing about drafting (not zero)
    at_s: float = 0.0                  # when the generation ended (ttft_s + generation_s for the engine)
    policy_learning: bool = False      # the auto policy was still learning this machine's costs at the end
    cost_rounds_observed: int = 0      # rounds of this answer whose times the cost model learned from
    by_drafter: tuple[tuple[str, int, int], ...] = ()   # (drafter, drafted, accepted) for each drafter that drafted
    # (part, drafted, accepted, tokens, seconds) for each part of the answer (reasoning, answer, tool call)
    by_part: tuple[tuple[str, int, int, int, float], ...] = ()
    # how much faster than the main model alone, estimated: its learned step time for the tokens after the
    # first, over the generation's time (None: no cost model to say; Compare measures it)
    estimated_speedup: float | None = None
    # threads the main model and the draft decoded with at the end (learned unless the user gave them;
    # 0: not known, as for a remote server)
    threads: int = 0
    draft_threads: int = 0

    @property
    def prompt_tps(self) -> float:
        return rates.per_second(self.prompt_tokens_evaluated, self.prompt_s)

    def to_dict(self) -> dict:
        logprobs = {"logprobs": [token_prob_dict(p) for p in self.token_probs]} if self.token_probs else {}
        return {
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_evaluated": self.prompt_tokens_evaluated,
            "generated_tokens": self.generated_tokens,
            "ttft_s": self.ttft_s,
            "prompt_s": self.prompt_s,
            "generation_s": self.generation_s,
            "prompt_tps": self.prompt_tps,
            "generation_tps": self.generation_tps,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "main_tokens": self.main_tokens,
            "acceptance_rate": self.acceptance_rate,
            "rounds": self.rounds,
            "drafting_rounds": self.drafting_rounds,
            "mean_accepted_length": self.mean_accepted_length,
            "tokens_per_round": self.tokens_per_round,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "drafted_by_position": list(self.drafted_by_position),
            "accepted_by_position": list(self.accepted_by_position),
            "acceptance_by_position": self.acceptance_by_position(),
            "by_drafter": {name: {"drafted": d, "accepted": a} for name, d, a in self.by_drafter},
            "by_part": {part: part_dict(d, a, n, s) for part, d, a, n, s in self.by_part},
            "estimated_speedup": self.estimated_speedup,
            "threads": self.threads,
            "draft_threads": self.draft_threads,
            "stop_reason": self.stop_reason.value,
            "error": self.error,
            "text": self.text,
            "token_ids": list(self.token_ids),
            "warnings": list(self.warnings),
            "speculation_reported": self.speculation_reported,
            "policy_learning": self.policy_learning,
            "cost_rounds_observed": self.cost_rounds_observed,
        } | logprobs


def part_dict(drafted: int, accepted: int, tokens: int, seconds: float) -> dict:
    """One part's numbers (``Summary.by_part``) as JSON: counts, acceptance and speed."""
    return {"drafted": drafted, "accepted": accepted, "tokens": tokens, "seconds": seconds,
            "acceptance_rate": rates.ratio(accepted, drafted), "tokens_per_s": rates.per_second(tokens, seconds)}


Event = Started | Reading | TokenPiece | Round | Summary


def run_to_summary(events: Iterable[Event], on_event: Callable[[Event], None] | None = None) -> Summary:
    """Run a generation's events to its end: each event before the Summary goes to ``on_event``, the
    Summary is returned. Every consumer (the CLI, the window's and the server's workers, compare, the
    benchmarks) runs a generation through here or ``until_summary``."""
    steps = until_summary(events)
    while True:
        try:
            event = next(steps)
        except StopIteration as end:
            return end.value
        if on_event is not None:
            on_event(event)


def until_summary(events: Iterable[Event]) -> Generator[Event, None, Summary]:
    """A generation's events before its Summary, one at a time (a server slot steps through them beside
    others'); the Summary is the generator's value. A stream that ends without one is an error."""
    for event in events:
        if isinstance(event, Summary):
            return event
        yield event
    raise QuickdraftError("The generation ended without a summary.")

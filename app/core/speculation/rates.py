"""The rate formulas, written once: the live statistics (stats.py), the final Summary and the server's
timings use these."""

from __future__ import annotations

from typing import Sequence


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def per_second(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def generation_tps(generated: int, seconds: float) -> float:
    """Tokens per second after the first token (the first one is paid for by the prompt), over the
    ``seconds`` since the first token."""
    return per_second(generated - 1, seconds) if generated > 1 else 0.0


def tokens_per_round(generated: int, rounds: int) -> float:
    """Tokens gained per main-model pass after the first token (1.0 without speculation)."""
    return ratio(generated - 1, rounds) if generated > 1 else 0.0


def by_position(accepted: Sequence[int], drafted: Sequence[int]) -> list[float]:
    """Acceptance rate at each draft position (a position nothing was accepted at may be missing
    from ``accepted``)."""
    padded = list(accepted) + [0] * max(0, len(drafted) - len(accepted))
    return [ratio(a, d) for a, d in zip(padded, drafted)]


class CountRates:
    """The rates read off a generation's counts, written once for the live statistics (stats.py) and
    the Summary (events.py). What mixes it in has ``accepted``, ``drafted``, ``drafting_rounds``,
    ``rounds``, ``generation_s``, ``accepted_by_position``, ``drafted_by_position`` and
    ``generated_tokens`` (the tokens generated so far)."""

    @property
    def acceptance_rate(self) -> float:
        return ratio(self.accepted, self.drafted)

    @property
    def mean_accepted_length(self) -> float:
        """Accepted draft tokens per round that drafted."""
        return ratio(self.accepted, self.drafting_rounds)

    @property
    def tokens_per_round(self) -> float:
        return tokens_per_round(self.generated_tokens, self.rounds)

    @property
    def generation_tps(self) -> float:
        return generation_tps(self.generated_tokens, self.generation_s)

    def acceptance_by_position(self) -> list[float]:
        return by_position(self.accepted_by_position, self.drafted_by_position)

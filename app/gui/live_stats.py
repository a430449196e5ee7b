"""Numbers of one generation as it runs, computed from the engine's events (no Qt, no clocks).

The worker stamps each piece with the seconds since generation started; rounds carry their own
elapsed time, so every rate here is measured on the worker's clock, not on signal arrival.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from app.core.events import Origin, Round, Summary, TokenPiece

TPS_WINDOW_S = 0.5       # "tokens/sec now" is measured over this much recent generation
ROLLING_ROUNDS = 8       # rounds in the rolling acceptance rate
MAX_CHART_POINTS = 400   # longer series are thinned before they reach a chart


@dataclass
class LiveStats:
    prompt_tokens: int = 0
    generated: int = 0
    ttft_s: float | None = None
    drafted: int = 0
    accepted: int = 0
    drafting_rounds: int = 0
    rounds: int = 0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    tps_points: list[tuple[float, float]] = field(default_factory=list)       # (elapsed s, tok/s)
    round_acceptance: list[tuple[int, float]] = field(default_factory=list)   # (round, rate)
    rolling_acceptance: list[tuple[int, float]] = field(default_factory=list)
    runs: list[list[str]] = field(default_factory=list)                       # [text, origin] merged
    round_ends_s: list[float] = field(default_factory=list)                    # each round's elapsed_s
    summary: Summary | None = None
    _window: deque = field(default_factory=deque)
    _rolling: deque = field(default_factory=lambda: deque(maxlen=ROLLING_ROUNDS))
    _piece_tokens: int = 0           # tokens the pieces carried so far
    _last_token_s: float = 0.0       # when the latest of them arrived

    # --- feeding -------------------------------------------------------------------------------

    def add_piece(self, piece: TokenPiece, at_s: float) -> None:
        if piece.token_ids:
            if self.ttft_s is None:
                self.ttft_s = at_s
            self._piece_tokens += len(piece.token_ids)
            self._last_token_s = at_s
        if not self.rounds:  # before the first round only pieces tell how many tokens exist
            self.generated += len(piece.token_ids)
        if piece.text:
            origin = piece.origin.value if isinstance(piece.origin, Origin) else str(piece.origin)
            if self.runs and self.runs[-1][1] == origin:
                self.runs[-1][0] += piece.text
            else:
                self.runs.append([piece.text, origin])

    def add_round(self, r: Round) -> None:
        self.rounds += 1
        self.generated = max(self.generated, r.generated_total)
        self.round_ends_s.append(r.elapsed_s)
        self._add_acceptance(r)
        self._add_tps_point(r)

    def finish(self, summary: Summary) -> None:
        self.summary = summary
        self.generated = summary.generated_tokens
        self.drafted, self.accepted = summary.drafted, summary.accepted
        self.drafting_rounds, self.rounds = summary.drafting_rounds, summary.rounds
        self.drafted_by_position = list(summary.drafted_by_position)
        self.accepted_by_position = list(summary.accepted_by_position)
        self.ttft_s = summary.ttft_s

    def _add_acceptance(self, r: Round) -> None:
        if r.drafted <= 0:
            return
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.drafting_rounds += 1
        for pos in range(r.drafted):
            if pos >= len(self.drafted_by_position):
                self.drafted_by_position.append(0)
                self.accepted_by_position.append(0)
            self.drafted_by_position[pos] += 1
            self.accepted_by_position[pos] += pos < r.accepted
        self.round_acceptance.append((r.index, r.accepted / r.drafted))
        self._rolling.append((r.drafted, r.accepted))
        drafted = sum(d for d, _ in self._rolling)
        self.rolling_acceptance.append((r.index, sum(a for _, a in self._rolling) / drafted))

    def _add_tps_point(self, r: Round) -> None:
        self._window.append((r.elapsed_s, r.generated_total))
        while len(self._window) > 2 and r.elapsed_s - self._window[1][0] >= TPS_WINDOW_S:
            self._window.popleft()
        (t0, n0), (t1, n1) = self._window[0], self._window[-1]
        if t1 > t0:
            self.tps_points.append((t1, (n1 - n0) / (t1 - t0)))

    # --- reading -------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.runs)

    @property
    def tps_now(self) -> float:
        return self.tps_points[-1][1] if self.tps_points else 0.0

    @property
    def tps_message(self) -> float:
        if self.summary is not None:
            return self.summary.generation_tps
        # pieces only: their times and the first token's are on the same (the worker's) clock, while
        # a round's elapsed_s is on the engine's, which starts later
        if self.ttft_s is None or self._piece_tokens < 2 or self._last_token_s <= self.ttft_s:
            return 0.0
        return (self._piece_tokens - 1) / (self._last_token_s - self.ttft_s)

    @property
    def prompt_tps(self) -> float:
        if self.summary is not None:
            return self.summary.prompt_tps
        return self.prompt_tokens / self.ttft_s if self.ttft_s else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.accepted / self.drafting_rounds if self.drafting_rounds else 0.0

    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_position, self.drafted_by_position)]


def thin(points: list[tuple[float, float]], limit: int = MAX_CHART_POINTS) -> list[tuple[float, float]]:
    """Every k-th point (always keeping the last) so a chart never draws more than ``limit``."""
    if len(points) <= limit:
        return points
    step = -(-len(points) // limit)
    kept = points[::step]
    return kept if kept[-1] == points[-1] else kept + [points[-1]]


def message_stats(summary: Summary, drafter: str, main_name: str, draft_name: str | None) -> dict:
    """What a message stores about the generation that produced it."""
    data = summary.to_dict()
    data.pop("text", None)
    data.update(drafter=drafter, main_model=main_name, draft_model=draft_name or "")
    return data


def format_footer(stats: dict) -> str:
    """'42.1 tok/s · 118 tokens · drafted 96 · accepted 71 (74%) · 1.9x' (parts only when known)."""
    if not stats or "generated_tokens" not in stats:
        return ""
    parts = [f"{stats.get('generation_tps', 0.0):.1f} tok/s", f"{stats['generated_tokens']} tokens"]
    drafted = stats.get("drafted", 0)
    if drafted:
        accepted = stats.get("accepted", 0)
        parts += [f"drafted {drafted}", f"accepted {accepted} ({round(100 * accepted / drafted)}%)"]
    if stats.get("speedup"):
        parts.append(f"{stats['speedup']:.1f}x")
    reason = stats.get("stop_reason")
    if reason == "cancel":
        parts.append("stopped")
    elif reason == "error":
        parts.append("failed")
    return " · ".join(parts)

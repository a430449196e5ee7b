"""One generation as the window shows it while it runs: the core's numbers (GenerationStats, from
the engine's stamped events) plus what only the window needs: chart series, the answer's text in runs
by origin and, for a thinking model, its reasoning apart. No Qt, no clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.chat.reasoning import REASONING, ReasoningSplitter, ThinkingFormat
from app.core.params import DrafterKind
from app.core.speculation.events import Event, Reading, Round, StopReason, Summary, TokenPiece, part_dict
from app.core.speculation.stats import GenerationStats

MAX_CHART_POINTS = 400   # longer series are thinned before they reach a chart


@dataclass
class LiveStats(GenerationStats):
    tps_points: list[tuple[float, float]] = field(default_factory=list)       # (at s, tok/s)
    round_acceptance: list[tuple[int, float]] = field(default_factory=list)   # (round, rate)
    rolling_acceptance: list[tuple[int, float]] = field(default_factory=list)
    runs: list[list[str]] = field(default_factory=list)                       # [text, origin] merged
    round_ends_s: list[float] = field(default_factory=list)                    # each round's at_s
    thinking: ThinkingFormat | None = None    # a thinking model's markers: its reasoning goes apart
    reasoning: str = ""
    reasoning_from_s: float | None = None     # when the reasoning began and ended (the engine's clock)
    reasoning_until_s: float | None = None
    reading: Reading | None = None            # how far the prompt has been read, until the answer starts
    _splitter: ReasoningSplitter | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.thinking is not None:
            self._splitter = ReasoningSplitter(self.thinking)

    def add(self, event: Event) -> None:
        super().add(event)
        if isinstance(event, TokenPiece) and event.text:
            self._add_text(event)
        elif isinstance(event, Round):
            self._add_points(event)
        elif isinstance(event, Summary) and self._splitter is not None:
            self._add_parts(self._splitter.finish(), "main")
        elif isinstance(event, Reading):
            self.reading = event

    def status_line(self) -> str:
        """What the answer's footer says while it streams: how far the prompt has been read (tokens and
        speed) until the first token, then "generating…"."""
        r = self.reading
        if r is None or self.generated_tokens or r.done >= r.total:
            return "generating…"
        return f"reading the conversation: {r.done:,} of {r.total:,} tokens ({r.tokens_per_s:,.0f} tokens/s)"

    def _add_text(self, piece: TokenPiece) -> None:
        if self._splitter is None:
            self._add_run(piece.text, piece.origin.value)
            return
        before = self._splitter.part
        self._add_parts(self._splitter.feed(piece.text), piece.origin.value)
        if REASONING in (before, self._splitter.part) and self.reasoning_from_s is None:
            self.reasoning_from_s = piece.at_s
        if before == REASONING and self._splitter.part != REASONING and self.reasoning_until_s is None:
            self.reasoning_until_s = piece.at_s

    def _add_parts(self, parts: list[tuple[str, str]], origin: str) -> None:
        for part, text in parts:
            if part == REASONING:
                self.reasoning += text
            else:
                self._add_run(text, origin)

    def _add_run(self, text: str, origin: str) -> None:
        if self.runs and self.runs[-1][1] == origin:
            self.runs[-1][0] += text
        else:
            self.runs.append([text, origin])

    @property
    def thinking_now(self) -> bool:
        """The model is writing its reasoning (the answer has not begun)."""
        return self._splitter is not None and self._splitter.part == REASONING and self.summary is None

    @property
    def thinking_s(self) -> float | None:
        """How long the model has thought (so far, while it still thinks; to the end, when it never
        stopped); None: no reasoning."""
        if self.reasoning_from_s is None or not (self.reasoning or self.thinking_now):
            return None
        until = self.reasoning_until_s
        if until is None:
            until = (self.ttft_s or 0.0) + self.generation_s
        return max(0.0, until - self.reasoning_from_s)

    def _add_points(self, r: Round) -> None:
        self.round_ends_s.append(r.at_s)
        if self.tps_now > 0:
            self.tps_points.append((r.at_s, self.tps_now))
        if r.drafted > 0:
            self.round_acceptance.append((r.index, r.accepted / r.drafted))
            self.rolling_acceptance.append((r.index, self.rolling_acceptance_rate))

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.runs)


def thin(points: list[tuple[float, float]], limit: int = MAX_CHART_POINTS) -> list[tuple[float, float]]:
    """Every k-th point (always keeping the last) so a chart never draws more than ``limit``."""
    if len(points) <= limit:
        return points
    step = -(-len(points) // limit)
    kept = points[::step]
    return kept if kept[-1] == points[-1] else kept + [points[-1]]


def message_stats(summary: Summary, drafter: DrafterKind | str, main_name: str, draft_name: str | None,
                  thinking_s: float | None = None) -> dict:
    """What a message stores about the generation that produced it (``thinking_s``: how long a
    thinking model thought, for its folded reasoning)."""
    data = summary.to_dict()
    data.pop("text", None)
    data.update(drafter=str(drafter), main_model=main_name, draft_model=draft_name or "")
    if thinking_s is not None:
        data["thinking_s"] = thinking_s
    return data


def stored_stats(stats: dict) -> LiveStats | None:
    """A saved answer's numbers (``message_stats``) as the Speculation tab shows them, for the answer a
    conversation ends with when it is opened or switched to: the tiles and the acceptance by draft
    position (each round is not saved: the other charts stay empty). None when they are not all there
    (an answer cut short, or saved by an older version)."""
    try:
        summary = Summary(
            **{name: stats[name] for name in _SUMMARY_NUMBERS},
            drafted_by_position=tuple(stats["drafted_by_position"]),
            accepted_by_position=tuple(stats["accepted_by_position"]),
            stop_reason=StopReason(stats["stop_reason"]),
            by_drafter=tuple((name, d["drafted"], d["accepted"]) for name, d in stats.get("by_drafter", {}).items()),
            by_part=tuple((part, d["drafted"], d["accepted"], d["tokens"], d["seconds"])
                          for part, d in stats.get("by_part", {}).items()),
            speculation_reported=stats.get("speculation_reported", True),
            estimated_speedup=stats.get("estimated_speedup"),
            threads=stats.get("threads", 0), draft_threads=stats.get("draft_threads", 0))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    live = LiveStats()
    live.add(summary)
    return live


_SUMMARY_NUMBERS = ("prompt_tokens", "prompt_tokens_evaluated", "generated_tokens", "ttft_s", "prompt_s", "generation_s",
                    "drafted", "accepted", "main_tokens", "rounds", "drafting_rounds", "draft_s", "verify_s")
PART_NAMES = {"reasoning": "thinking", "answer": "answer", "tool_call": "tool call"}


def parts_json(stats: GenerationStats) -> dict:
    """The live numbers' parts (reasoning, answer, tool call) as a Summary's ``by_part`` is in JSON."""
    return {part: part_dict(d, a, n, s) for part, d, a, n, s in stats.part_rows()}


def format_parts(by_part: dict, sep: str = " · ") -> str:
    """'thinking 41 tok/s, 80% accepted · answer 25 tok/s, 52% accepted': each part of an answer (a
    Summary's ``by_part`` as JSON) where there was more than one; "" otherwise."""
    if len(by_part or {}) < 2:
        return ""
    shown = []
    for part, numbers in by_part.items():
        text = f"{PART_NAMES.get(part, part)} {numbers.get('tokens_per_s', 0.0):.1f} tok/s"
        if numbers.get("drafted"):
            text += f", {round(100 * numbers.get('accepted', 0) / numbers['drafted'])}% accepted"
        shown.append(text)
    return sep.join(shown)


INTERRUPTED = "interrupted"   # a streaming answer saved before its end (see the controller's _keep_partial)


def format_estimate(speedup: float) -> str:
    """An answer's estimated speedup as the footer, the Speculation tab and Compare's line all show it."""
    return f"≈{speedup:.1f}x"


def format_footer(stats: dict) -> str:
    """'42.1 tok/s · 118 tokens · drafted 96 · accepted 71 (74%) · ≈1.8x vs main alone (estimated) · 1.9x
    measured by Compare' (parts only when known), and a line with each part of the answer (thinking,
    answer, tool call) where there was more than one."""
    if stats and stats.get("stop_reason") == INTERRUPTED:
        return "interrupted: the app closed before this answer ended"
    if not stats or "generated_tokens" not in stats:
        return ""
    parts = [f"{stats.get('generation_tps', 0.0):.1f} tok/s", f"{stats['generated_tokens']} tokens"]
    drafted = stats.get("drafted", 0)
    if drafted:
        accepted = stats.get("accepted", 0)
        parts += [f"drafted {drafted}", f"accepted {accepted} ({round(100 * accepted / drafted)}%)"]
    if stats.get("estimated_speedup"):
        parts.append(f"{format_estimate(stats['estimated_speedup'])} vs main alone (estimated)")
    if stats.get("speedup"):
        parts.append(f"{stats['speedup']:.1f}x measured by Compare")
    reason = stats.get("stop_reason")
    if reason == "cancel":
        parts.append("stopped")
    elif reason == "error":
        parts.append("failed")
    split = format_parts(stats.get("by_part") or {})
    return " · ".join(parts) + (f"\n{split}" if split else "")

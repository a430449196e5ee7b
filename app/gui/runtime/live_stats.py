"""One generation as the window shows it while it runs: the core's numbers (GenerationStats, from
the engine's stamped events) plus what only the window needs: chart series and the text in runs by
origin. No Qt, no clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.params import DrafterKind
from app.core.speculation.events import Event, Round, Summary, TokenPiece
from app.core.speculation.stats import GenerationStats

MAX_CHART_POINTS = 400   # longer series are thinned before they reach a chart


@dataclass
class LiveStats(GenerationStats):
    tps_points: list[tuple[float, float]] = field(default_factory=list)       # (at s, tok/s)
    round_acceptance: list[tuple[int, float]] = field(default_factory=list)   # (round, rate)
    rolling_acceptance: list[tuple[int, float]] = field(default_factory=list)
    runs: list[list[str]] = field(default_factory=list)                       # [text, origin] merged
    round_ends_s: list[float] = field(default_factory=list)                    # each round's at_s

    def add(self, event: Event) -> None:
        super().add(event)
        if isinstance(event, TokenPiece) and event.text:
            self._add_text(event)
        elif isinstance(event, Round):
            self._add_points(event)

    def _add_text(self, piece: TokenPiece) -> None:
        origin = piece.origin.value
        if self.runs and self.runs[-1][1] == origin:
            self.runs[-1][0] += piece.text
        else:
            self.runs.append([piece.text, origin])

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


def message_stats(summary: Summary, drafter: DrafterKind | str, main_name: str, draft_name: str | None) -> dict:
    """What a message stores about the generation that produced it."""
    data = summary.to_dict()
    data.pop("text", None)
    data.update(drafter=str(drafter), main_model=main_name, draft_model=draft_name or "")
    return data


INTERRUPTED = "interrupted"   # a streaming answer saved before its end (see the controller's _keep_partial)


def format_footer(stats: dict) -> str:
    """'42.1 tok/s · 118 tokens · drafted 96 · accepted 71 (74%) · ≈1.8x vs main alone (estimated) · 1.9x
    measured by Compare' (parts only when known)."""
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
        parts.append(f"≈{stats['estimated_speedup']:.1f}x vs main alone (estimated)")
    if stats.get("speedup"):
        parts.append(f"{stats['speedup']:.1f}x measured by Compare")
    reason = stats.get("stop_reason")
    if reason == "cancel":
        parts.append("stopped")
    elif reason == "error":
        parts.append("failed")
    return " · ".join(parts)

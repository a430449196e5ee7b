"""Live numbers of the running (or last) generation: a grid of tiles, and the tab that holds them
with the charts."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.core.params import DrafterKind
from app.gui.panels.charts import ChartsPanel
from app.gui.runtime.live_stats import LiveStats, format_estimate, format_parts, parts_json

# three tiles a row: the speeds, then latency and accepted per round, then the draft counts
TILES = [
    ("tps_now", "tok/s now"),
    ("tps_message", "tok/s message"),
    ("speedup", "vs main alone (est.)"),
    ("ttft", "first token"),
    ("prompt_tps", "prompt tok/s"),
    ("mean_accepted", "accepted / round"),
    ("drafted", "drafted"),
    ("accepted", "accepted"),
    ("acceptance", "acceptance"),
]
COLUMNS = 3
DASH = "–"
TITLE = "LIVE SPECULATION"
LEARNING = "learning this machine's speed…"
LEARNING_TIP = ("The auto policy drafts cautiously until it has measured what drafting and checking "
                "tokens cost on this machine.")
NOT_REPORTED = "not reported"   # a remote server said nothing about drafting
PARTS_TIP = ("Speed and acceptance apart for each part of the answer: the model's thinking, its answer, and "
             "the JSON of its tool calls. Drafting pays most where the text is predictable.")
DRAFTERS_TIP = ("Who drafted this answer's tokens: prompt lookup copies the conversation, the suffix index "
                "what followed the same words in earlier answers and prompts, the draft model guesses")
THREADS_TIP = ("CPU threads each model decoded with. Unless you set them, they are learned while the "
               "app answers: fewer when another program keeps cores busy, all of them when the machine is quiet.")


def format_threads(main: int, draft: int) -> str:
    """"threads: main 2 · draft 2 (learned)": the window never sets them, so they are always learned;
    "" when not known (a remote server)."""
    if main <= 0:
        return ""
    return f"threads: main {main}" + (f" · draft {draft}" if draft > 0 else "") + " (learned)"


def format_duration(seconds: float | None) -> str:
    """"850 ms" below a second, "104.6 s" from one second on."""
    if seconds is None:
        return DASH
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def format_rate(per_second: float) -> str:
    """Tokens per second: "–" while unknown, one decimal below 10 (a slow rate never reads "0")."""
    if per_second <= 0:
        return DASH
    return f"{per_second:.1f}" if per_second < 10 else f"{per_second:.0f}"


def format_speedup(speedup: float | None) -> str:
    """The answer's estimated speedup over the main model alone: "≈1.4x", "–" while unknown."""
    return DASH if speedup is None else format_estimate(speedup)


class StatsPanel(QWidget):
    """The title row (with the learning line at its right, so it never moves what is below) over
    the tiles."""

    def __init__(self, parent=None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addLayout(self._header())
        grid = QGridLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(6)
        self._values: dict[str, QLabel] = {}
        for i, (key, name) in enumerate(TILES):
            grid.addWidget(self._tile(key, name), i // COLUMNS, i % COLUMNS)
        layout.addLayout(grid)
        self.parts = QLabel()   # thinking, answer and tool calls apart, when an answer had more than one
        self.parts.setObjectName("statName")
        self.parts.setToolTip(PARTS_TIP)
        self.parts.setWordWrap(True)
        layout.addWidget(self.parts)
        self.drafters = QLabel()   # who drafted: prompt lookup, the suffix index, the draft model ...
        self.drafters.setObjectName("statName")
        self.drafters.setToolTip(DRAFTERS_TIP)
        self.drafters.setWordWrap(True)
        layout.addWidget(self.drafters)
        self.threads = QLabel()
        self.threads.setObjectName("statName")
        self.threads.setToolTip(THREADS_TIP)
        layout.addWidget(self.threads)
        self.clear()

    def _header(self) -> QHBoxLayout:
        title = QLabel(TITLE)
        title.setObjectName("sectionTitle")
        # while the auto policy learns what batches cost here it drafts cautiously: say so, in the
        # title's row, its room kept while hidden, so that showing it moves and shrinks nothing
        self.learning = QLabel(LEARNING)
        self.learning.setObjectName("statName")
        self.learning.setToolTip(LEARNING_TIP)
        policy = self.learning.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.learning.setSizePolicy(policy)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(title)
        row.addStretch(1)
        row.addWidget(self.learning)
        return row

    def _tile(self, key: str, name: str) -> QFrame:
        tile = QFrame()
        tile.setObjectName("panel")
        tile.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        layout = QVBoxLayout(tile)
        layout.setContentsMargins(8, 4, 6, 4)
        layout.setSpacing(0)
        value = QLabel(DASH)
        value.setObjectName("statValue")
        label = QLabel(name)
        label.setObjectName("statName")
        layout.addWidget(value)
        layout.addWidget(label)
        self._values[key] = value
        return tile

    def clear(self) -> None:
        for label in self._values.values():
            label.setText(DASH)
        self.threads.setText("")
        self.parts.setText("")
        self.parts.hide()
        self.drafters.setText("")
        self.drafters.hide()
        self.set_learning(False)

    def set_learning(self, learning: bool) -> None:
        """Show the learning line while the policy is still learning this machine's costs (the
        stats follow ``Round.learning`` during an answer, ``Summary.policy_learning`` at its end)."""
        self.learning.setVisible(learning)

    def is_learning_shown(self) -> bool:
        return not self.learning.isHidden()

    def values(self) -> dict[str, str]:
        return {key: label.text() for key, label in self._values.items()}

    def update_from(self, stats: LiveStats) -> None:
        self._show_rates(stats)
        if stats.summary is not None and not stats.summary.speculation_reported:
            # a server that says nothing about drafting: say so, rather than show zeros
            counts = dict.fromkeys(("drafted", "accepted", "acceptance", "mean_accepted"), NOT_REPORTED)
        else:
            counts = {
                "drafted": str(stats.drafted),
                "accepted": str(stats.accepted),
                "acceptance": f"{100 * stats.acceptance_rate:.0f}%" if stats.drafted else DASH,
                "mean_accepted": f"{stats.mean_accepted_length:.2f}" if stats.drafting_rounds else DASH,
            }
        for key, text in counts.items():
            self._values[key].setText(text)
        parts = format_parts(parts_json(stats), "\n")
        self.parts.setText(parts)
        self.parts.setVisible(bool(parts))
        drafters = format_drafters(stats.by_drafter)
        self.drafters.setText(drafters)
        self.drafters.setVisible(bool(drafters))
        self.set_learning(stats.learning)

    def _show_rates(self, stats: LiveStats) -> None:
        self._values["tps_now"].setText(f"{stats.tps_now:.1f}" if stats.tps_points else DASH)
        self._values["tps_message"].setText(f"{stats.generation_tps:.1f}" if stats.generation_tps else DASH)
        self._values["ttft"].setText(format_duration(stats.ttft_s))
        self._values["prompt_tps"].setText(format_rate(stats.prompt_tps))
        # the estimate comes with the answer's summary: "–" while it is generating
        summary = stats.summary
        self._values["speedup"].setText(format_speedup(summary.estimated_speedup if summary else None))
        if summary is not None:
            self.threads.setText(format_threads(summary.threads, summary.draft_threads))


def format_drafters(by_drafter: dict[str, list[int]]) -> str:
    """Each drafter that drafted, by its name, with its tokens accepted of those drafted; "" where one
    drafter did it all (the tiles say it), as the parts' line is shown only for more than one part."""
    names = {kind.value: kind.label for kind in DrafterKind}
    drafted = [(names.get(name, name), d, a) for name, (d, a) in by_drafter.items() if d]
    return "  ·  ".join(f"{name}: {a} of {d} accepted" for name, d, a in drafted) if len(drafted) > 1 else ""


class SpeculationPanel(QWidget):
    """The "Speculation" tab: the counters over the charts, both fed from one LiveStats."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.stats = StatsPanel()
        self.charts = ChartsPanel()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 10)
        layout.setSpacing(8)
        layout.addWidget(self.stats)
        layout.addWidget(self.charts, 1)

    def clear(self) -> None:
        self.stats.clear()
        self.charts.clear()

    def update_from(self, live: LiveStats) -> None:
        self.stats.update_from(live)
        self.charts.update_from(live)

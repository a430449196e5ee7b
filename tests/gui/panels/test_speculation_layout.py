"""The Speculation tab keeps its shape in the window at 1280x800, at 1000 px wide and at the window's
minimum size: the learning line moves and shrinks no chart, and no axis label is elided to "..."
(QtCharts does that to a chart too short for its axes, and to labels packed too densely)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QGraphicsTextItem

from app.core.speculation.events import Round, Summary
from app.gui.panels import charts as charts_module
from app.gui.panels.charts import CHART_MIN_HEIGHT, ChartsPanel
from app.gui.runtime.live_stats import LiveStats

SIZES = [(1280, 800), (1000, 800), (1000, 700)]   # the last is the window's minimum size
TEXT_ITEM = QGraphicsTextItem().type()


def chart_texts(view) -> list[str]:
    """Every text a chart view shows: its title, its axes' labels (as drawn, elided or not)."""
    texts = []
    for item in view.scene().items():
        if item.type() == TEXT_ITEM and item.isVisible():
            shown = item.toGraphicsObject()
            assert isinstance(shown, QGraphicsTextItem)
            if shown.toPlainText():
                texts.append(shown.toPlainText())
    return texts


def answer(rounds: int = 300, learning: bool = True, summary: bool = False) -> LiveStats:
    """An answer's statistics: drafting rounds of 1 to 16 tokens, mixed acceptance, a few seconds."""
    live = LiveStats()
    for i in range(rounds):
        drafted = 1 + i % 16
        live.add(Round(i, drafted=drafted, accepted=(i * 7) % (drafted + 1), draft_s=0.004, verify_s=0.02,
                       generated_tokens=3 * (i + 1), at_s=0.5 + 0.025 * (i + 1), learning=learning, drafter="model"))
    if summary:
        live.add(Summary(prompt_tokens=117, prompt_tokens_evaluated=117, generated_tokens=3 * rounds, ttft_s=0.5,
                         prompt_s=0.5, generation_s=0.025 * rounds, drafted=live.drafted, accepted=live.accepted,
                         main_tokens=3 * rounds - live.accepted, rounds=rounds, drafting_rounds=rounds,
                         draft_s=0.004 * rounds, verify_s=0.02 * rounds, policy_learning=learning,
                         drafted_by_position=tuple(live.drafted_by_position),
                         accepted_by_position=tuple(live.accepted_by_position),
                         estimated_speedup=1.43))
    return live


def chart_geometry(window) -> list[QRect]:
    charts = window.charts
    return [QRect(view.mapTo(window, view.rect().topLeft()), view.size())
            for view in (charts.tps_view, charts.acceptance_view, charts.position_view)]


@pytest.fixture
def window_at(make_window):
    def make(width: int, height: int):
        window = make_window()
        window.resize(width, height)
        QApplication.processEvents()
        assert (window.width(), window.height()) == (width, height)
        return window
    return make


@pytest.mark.parametrize("width,height", SIZES)
def test_the_learning_line_moves_and_shrinks_no_chart(window_at, width, height):
    window = window_at(width, height)
    panel = window.speculation
    panel.update_from(answer(learning=False))
    QApplication.processEvents()
    assert not window.stats_panel.is_learning_shown()
    before = chart_geometry(window)

    panel.update_from(answer(learning=True, summary=True))   # the answer ends still learning
    QApplication.processEvents()
    assert window.stats_panel.is_learning_shown()
    assert chart_geometry(window) == before

    panel.clear()   # and hidden again for the next answer
    QApplication.processEvents()
    assert not window.stats_panel.is_learning_shown() and chart_geometry(window) == before


@pytest.mark.parametrize("width,height", SIZES)
@pytest.mark.parametrize("learning", [False, True])
def test_no_axis_label_is_elided(window_at, width, height, learning):
    window = window_at(width, height)
    window.speculation.update_from(answer(learning=learning, summary=True))
    QApplication.processEvents()
    charts = window.charts
    shown = {name: chart_texts(view) for name, view in
             (("tps", charts.tps_view), ("acceptance", charts.acceptance_view), ("positions", charts.position_view))}
    for name, texts in shown.items():
        assert not [t for t in texts if "..." in t or "…" in t], (name, texts)
        assert all(view.height() >= CHART_MIN_HEIGHT for view in
                   (charts.tps_view, charts.acceptance_view, charts.position_view))
    assert {"0 s", "5 s"} <= set(shown["tps"])                      # seconds, in the labels
    assert {"0%", "50%", "100%"} <= set(shown["acceptance"])       # percent, in the labels
    assert {"0", "300"} <= set(shown["acceptance"])                 # rounds: first and last tick
    assert {"1", "2", "16", "100%"} <= set(shown["positions"])     # draft positions 1 to 16


def test_charts_at_their_minimum_height_show_every_label_whole(qtbot):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.update_from(answer())
    panel.resize(360, panel.minimumSizeHint().height())
    panel.show()
    QApplication.processEvents()
    for view in (panel.tps_view, panel.acceptance_view, panel.position_view):
        assert view.height() == CHART_MIN_HEIGHT
        texts = chart_texts(view)
        assert texts and not [t for t in texts if "..." in t], texts


def test_the_tokens_per_second_axis_has_few_round_labels():
    for highest in [0.05, 0.3, 0.9, 1, 3, 7.9, 10, 12, 37, 45, 52, 99, 150, 870, 1234, 25_000]:
        top, ticks = charts_module.rate_axis_span(highest)
        labels = ["%g" % (top * i / (ticks - 1)) for i in range(ticks)]
        assert top >= highest and 3 <= ticks <= 4, (highest, top, ticks)
        assert len(set(labels)) == ticks and all(len(label) <= 5 for label in labels), labels

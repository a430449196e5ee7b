"""The acceptance chart's round axis shows whole rounds, never the same label twice."""

from __future__ import annotations

from app.core.speculation.events import Round
from app.gui.panels.charts import ChartsPanel, round_axis_span
from app.gui.runtime.live_stats import LiveStats


def _round_labels(panel: ChartsPanel) -> list[float]:
    axis = panel.acc_x
    step = (axis.max() - axis.min()) / (axis.tickCount() - 1)
    return [axis.min() + i * step for i in range(axis.tickCount())]


def _whole_and_distinct(labels: list[float]) -> bool:
    return all(v == int(v) for v in labels) and len({int(v) for v in labels}) == len(labels)


def test_round_axis_before_data_and_after_rounds(qtbot):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    assert panel.acc_x.labelFormat() == "%d"
    assert _whole_and_distinct(_round_labels(panel))

    live = LiveStats()
    for i in range(3):
        live.add(Round(i, drafted=4, accepted=2, draft_s=0, verify_s=0, generated_tokens=3 * (i + 1),
                       at_s=0.1 * (i + 1)))
    panel.update_from(live)
    labels = _round_labels(panel)
    assert _whole_and_distinct(labels) and labels[-1] >= 2

    panel.clear()
    assert _whole_and_distinct(_round_labels(panel))


def test_round_axis_span_covers_the_last_round_in_whole_steps():
    for last in [0, 1, 2, 3, 4, 5, 6, 7, 11, 37, 399, 1000]:
        top, ticks = round_axis_span(last)
        assert top >= max(last, 1) and 2 <= ticks <= 6 and top % (ticks - 1) == 0


def test_seconds_axis_labels_differ_for_a_short_answer(qtbot):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    live = LiveStats()
    live.tps_points.extend([(0.02 * i, 800.0 + i) for i in range(1, 8)])  # a 0.14 s answer
    panel.update_from(live)
    axis = panel.tps_x
    step = (axis.max() - axis.min()) / (axis.tickCount() - 1)
    labels = [axis.labelFormat() % (axis.min() + i * step) for i in range(axis.tickCount())]
    assert len(set(labels)) == len(labels), labels
    assert axis.max() >= 0.14


def test_the_seconds_axis_is_laid_out_a_few_times_per_answer_not_on_every_repaint(qtbot):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    layouts = []
    panel.tps_x.rangeChanged.connect(lambda low, high: layouts.append(high))
    live = LiveStats()
    for i in range(1, 201):   # a 2 s answer repainted 200 times
        live.tps_points.append((0.01 * i, 900.0))
        live.rounds = i
        panel.update_from(live)
    assert panel.tps_x.max() >= 2.0 and len(layouts) <= 12, layouts

    panel.clear()
    live = LiveStats()
    live.rounds = 1
    live.tps_points.append((0.05, 900.0))
    panel.update_from(live)
    assert 0.05 <= panel.tps_x.max() <= 0.2, "a new answer starts on its own scale"


def test_dots_at_0_and_100_percent_are_drawn_whole_at_the_charts_least_height(qtbot):
    """Issue 41, fault 6: the acceptance-by-round chart's 100% dots (every draft accepted) were cut in half
    by the plot area's top edge, and its 0% dots by the bottom; the axis has room past both ends, its labels
    still 0%, 50% and 100%."""
    from PySide6.QtCore import QPointF
    from PySide6.QtWidgets import QApplication

    from app.gui.panels.charts import CHART_MIN_HEIGHT, ROUND_MARKER_PX

    panel = ChartsPanel()
    qtbot.addWidget(panel)
    live = LiveStats()
    for i in range(40):
        live.add(Round(i, drafted=4, accepted=4 if i % 3 else 0, draft_s=0, verify_s=0, generated_tokens=3 * (i + 1),
                       at_s=0.1 * (i + 1)))
    panel.update_from(live)
    panel.resize(340, panel.minimumSizeHint().height())
    panel.show()
    QApplication.processEvents()
    assert panel.acceptance_view.height() == CHART_MIN_HEIGHT
    chart, radius = panel.acceptance_view.chart(), ROUND_MARKER_PX / 2
    plot = chart.plotArea()
    top, bottom = (chart.mapToPosition(QPointF(5, percent), panel.round_series).y() for percent in (100, 0))
    assert top - radius >= plot.top() and bottom + radius <= plot.bottom(), (plot, top, bottom)
    axis = panel.acc_y
    assert (axis.tickAnchor(), axis.tickInterval()) == (0, 50) and axis.min() < 0 and axis.max() > 100

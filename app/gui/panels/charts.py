"""Three QtCharts fed from LiveStats on a timer: tokens/sec over the generation, acceptance per
round and rolling, acceptance by draft position."""

from __future__ import annotations

import math

from PySide6.QtCharts import (QBarSeries, QBarSet, QCategoryAxis, QChart, QChartView, QLineSeries, QScatterSeries,
                              QValueAxis)
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QFrame, QVBoxLayout, QWidget

from app.gui.runtime.live_stats import LiveStats, thin
from app.gui.widgets import theme

# The three charts share the tab's height under the counters. At this height a chart still shows
# its title and every axis label whole (QtCharts elides labels to "..." when a chart is too short for
# them); the tab fits the window's minimum size (main_window.MINIMUM_SIZE) with three charts at it.
CHART_MIN_HEIGHT = 100
LABEL_POINT_SIZE = 8
TITLE_POINT_SIZE = 9
MAX_ROUND_TICKS = 6
MAX_RATE_INTERVALS = 3   # the tokens/s axis: at most 4 labels (more get elided in a short chart)
MAX_POSITION_LABELS = 9  # draft positions labelled under the bars: every one up to 9, then 1 and every k-th
PERCENT_TICKS = 3        # 0, 50, 100 labelled; 25 and 75 as minor grid lines
SECONDS_HEADROOM = 1.5   # the seconds axis grows in steps with room to spare, not on every repaint
ROUND_MARKER_PX = 5
DOT_ROOM = 8             # percent points above 100% and below 0%: a dot's radius at the charts' least height


def nice_axis_span(highest: float, max_intervals: int, whole: bool = False) -> tuple[float, int]:
    """(top, tick count) for an axis from 0 that reaches ``highest``: at most ``max_intervals`` steps
    of 1, 2, 2.5 or 5 times a power of ten (``whole``: whole numbers only), so every label is a round
    number and no two read the same."""
    highest = max(highest, 1 if whole else 1e-3)
    magnitude = 10 ** math.floor(math.log10(highest / max_intervals))
    for m in (1, 2, 2.5, 5, 10):
        step = m * magnitude
        if whole and (step < 1 or abs(step - round(step)) > 1e-9):
            continue
        if step * max_intervals >= highest * (1 - 1e-9):
            break
    if whole:
        step = round(step)
    intervals = max(1, math.ceil(highest / step - 1e-9))
    return step * intervals, intervals + 1


def round_axis_span(last_round: int) -> tuple[int, int]:
    """(top, tick count) for a round axis from 0 to at least ``last_round``: a round whole number of
    rounds between ticks (0, 20, 40 ... rather than 0, 19, 38 ...)."""
    top, ticks = nice_axis_span(last_round, MAX_ROUND_TICKS - 1, whole=True)
    return int(top), ticks


def rate_axis_span(highest: float) -> tuple[float, int]:
    """(top, tick count) for the tokens/s axis: room above ``highest``, at most MAX_RATE_INTERVALS
    round steps."""
    return nice_axis_span(highest * 1.1, MAX_RATE_INTERVALS)


def position_labels(count: int) -> list[int]:
    """The draft positions (1-based) labelled under ``count`` bars: all of them when they fit, else 1
    and every k-th (a label per bar elides two-digit ones to "...")."""
    if count <= MAX_POSITION_LABELS:
        return list(range(1, count + 1))
    step = -(-count // (MAX_POSITION_LABELS - 1))
    return [1] + list(range(step, count + 1, step))


def _font(points: int, bold: bool = False) -> QFont:
    font = QFont()
    font.setPointSize(points)
    font.setBold(bold)
    return font


def _chart(title: str) -> QChart:
    chart = QChart()
    chart.setTitle(title)
    chart.setTitleFont(_font(TITLE_POINT_SIZE, bold=True))
    chart.setTitleBrush(QColor(theme.TEXT))
    # a white card with the tiles' border, edge to edge in its view: no grey frame around it
    chart.layout().setContentsMargins(0, 0, 0, 0)
    chart.setBackgroundBrush(QColor(theme.PANEL_BG))
    chart.setBackgroundPen(QPen(QColor(theme.BORDER), 1))
    chart.setBackgroundRoundness(8)
    chart.setMargins(QMargins(6, 0, 10, 2))
    chart.legend().hide()
    chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)
    return chart


def _axis(low: float, high: float, fmt: str) -> QValueAxis:
    """A value axis without a title: its unit goes in the labels ("%g s", "%.0f%%") or the chart's
    title."""
    axis = QValueAxis()
    axis.setRange(low, high)
    axis.setLabelFormat(fmt)
    axis.setLabelsFont(_font(LABEL_POINT_SIZE))
    axis.setLabelsColor(QColor(theme.MUTED))
    axis.setGridLineColor(QColor(theme.BORDER))
    axis.setLinePenColor(QColor(theme.BORDER))
    return axis


def _percent_axis(room: float = 0.0) -> QValueAxis:
    """0% to 100%, labelled 0, 50 and 100 with minor lines at 25 and 75. ``room``: percent points of
    the axis beyond each end, so that a dot at 0% or 100% is drawn whole (the plot area clips what
    crosses its edge); the labels stay on 0, 50 and 100."""
    axis = _axis(-room, 100 + room, "%.0f%%")
    axis.setTickType(QValueAxis.TickType.TicksDynamic)
    axis.setTickAnchor(0)
    axis.setTickInterval(100 / (PERCENT_TICKS - 1))
    axis.setMinorTickCount(1)
    axis.setMinorGridLineColor(QColor(theme.BORDER).lighter(106))
    return axis


def _line(name: str, colour: str, width: float = 2.0) -> QLineSeries:
    series = QLineSeries()
    series.setName(name)
    series.setPen(QPen(QColor(colour), width))
    return series


def legend_title(title: str, entries: list[tuple[str, str, str]]) -> str:
    """A chart title with its legend in the same line (rich text): ``entries`` are (symbol,
    colour, name). A legend of its own would take a row of the chart's height."""
    small = f"font-size:{LABEL_POINT_SIZE}pt; font-weight:normal"
    keys = "&nbsp;&nbsp;".join(f'<span style="color:{colour}">{symbol}</span>'
                               f'<span style="color:{theme.MUTED}">&nbsp;{name}</span>'
                               for symbol, colour, name in entries)
    return f'{title}&nbsp;&nbsp;&nbsp;<span style="{small}">{keys}</span>'


def _view(chart: QChart) -> QChartView:
    view = QChartView(chart)
    view.setRenderHint(QPainter.RenderHint.Antialiasing)
    view.setFrameShape(QFrame.Shape.NoFrame)
    view.setStyleSheet("background: transparent")
    view.setMinimumHeight(CHART_MIN_HEIGHT)
    return view


class ChartsPanel(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._drawn_rounds = -1
        self._seconds_fitted = False
        self._build_tps()
        self._build_acceptance()
        self._build_positions()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        for view in (self.tps_view, self.acceptance_view, self.position_view):
            layout.addWidget(view)

    def _build_tps(self) -> None:
        chart = _chart("Tokens per second")
        self.tps_series = _line("tok/s", theme.MAIN_LINE)
        chart.addSeries(self.tps_series)
        # no axis titles: a title row under the labels takes as much height as the labels, and a
        # chart whose axes take over 40% of its height gets its labels elided (QtCharts' rule)
        self.tps_x, self.tps_y = _axis(0, 1, "%g s"), _axis(0, 10, "%g")
        self._set_rate_range(0.0)
        self._attach(chart, self.tps_series, self.tps_x, self.tps_y)
        self.tps_view = _view(chart)

    def _build_acceptance(self) -> None:
        chart = _chart(legend_title("Acceptance by round", [("●", theme.DRAFT_LINE, "per round"),
                                                            ("━", theme.ROLLING_LINE, "rolling")]))
        self.round_series = QScatterSeries()
        self.round_series.setName("per round")
        self.round_series.setMarkerSize(ROUND_MARKER_PX)
        self.round_series.setColor(QColor(theme.DRAFT_LINE))
        self.round_series.setBorderColor(QColor(theme.DRAFT_LINE))
        self.rolling_series = _line("rolling", theme.ROLLING_LINE)
        chart.addSeries(self.round_series)
        chart.addSeries(self.rolling_series)
        self.acc_x, self.acc_y = _axis(0, 1, "%d"), _percent_axis(room=DOT_ROOM)
        self._set_round_range(0)
        self._attach(chart, self.round_series, self.acc_x, self.acc_y)
        self._attach(chart, self.rolling_series, self.acc_x, self.acc_y)
        self.acceptance_view = _view(chart)

    def _build_positions(self) -> None:
        chart = _chart("Acceptance by draft position")
        self.position_set = QBarSet("accepted %")
        self.position_set.setColor(QColor(theme.DRAFT_LINE))
        self.position_series = QBarSeries()
        self.position_series.append(self.position_set)
        chart.addSeries(self.position_series)
        # a value axis with bar i at x = i and labels on chosen bars, not one label per bar
        self.pos_x = QCategoryAxis()
        self.pos_x.setLabelsPosition(QCategoryAxis.AxisLabelsPosition.AxisLabelsPositionOnValue)
        self.pos_x.setLabelsFont(_font(LABEL_POINT_SIZE))
        self.pos_x.setLabelsColor(QColor(theme.MUTED))
        self.pos_x.setGridLineVisible(False)
        self.pos_x.setLinePenColor(QColor(theme.BORDER))
        self._label_positions(0)
        self.pos_y = _percent_axis()
        self._attach(chart, self.position_series, self.pos_x, self.pos_y)
        self.position_view = _view(chart)

    @staticmethod
    def _attach(chart: QChart, series, x_axis, y_axis) -> None:
        if x_axis not in chart.axes():
            chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
            chart.addAxis(y_axis, Qt.AlignmentFlag.AlignLeft)
        series.attachAxis(x_axis)
        series.attachAxis(y_axis)

    # --- data ----------------------------------------------------------------------------------

    def clear(self) -> None:
        self._drawn_rounds = -1
        self._seconds_fitted = False
        self._set_round_range(0)
        self._set_rate_range(0.0)
        for series in (self.tps_series, self.round_series, self.rolling_series):
            series.clear()
        self.position_set.remove(0, self.position_set.count())
        self._label_positions(0)

    def update_from(self, stats: LiveStats) -> None:
        """Redraw only when rounds arrived since the last redraw (the timer calls this often)."""
        if stats.rounds == self._drawn_rounds and stats.summary is None:
            return
        self._drawn_rounds = stats.rounds
        self._draw_tps(stats)
        self._draw_acceptance(stats)
        self._draw_positions(stats)

    def _draw_tps(self, stats: LiveStats) -> None:
        points = thin(stats.tps_points)
        self.tps_series.replace([QPointF(t, v) for t, v in points])
        if points:
            self._extend_seconds_axis(points[-1][0])
            self._set_rate_range(max(v for _, v in points))

    def _set_rate_range(self, highest: float) -> None:
        top, ticks = rate_axis_span(highest if highest > 0 else 10.0)
        if (self.tps_y.max(), self.tps_y.tickCount()) != (top, ticks):
            self.tps_y.setRange(0, top)
            self.tps_y.setTickCount(ticks)

    def _extend_seconds_axis(self, last_s: float) -> None:
        """Make the seconds axis reach past ``last_s``. Laying an axis out again is the slowest part
        of a repaint (it stalled the GUI thread), so it happens a few times per answer."""
        if self._seconds_fitted and last_s <= self.tps_x.max():
            return
        self.tps_x.setRange(0, max(last_s * SECONDS_HEADROOM, 0.1))
        self.tps_x.applyNiceNumbers()  # round ticks ("0.05", not "0.0" twice for a short answer)
        self._seconds_fitted = True

    def _draw_acceptance(self, stats: LiveStats) -> None:
        per_round = thin(stats.round_acceptance)
        self.round_series.replace([QPointF(r, 100 * v) for r, v in per_round])
        self.rolling_series.replace([QPointF(r, 100 * v) for r, v in thin(stats.rolling_acceptance)])
        self._set_round_range(per_round[-1][0] if per_round else 0)

    def _set_round_range(self, last_round: int) -> None:
        top, ticks = round_axis_span(last_round)
        self.acc_x.setRange(0, top)
        self.acc_x.setTickCount(ticks)

    def _draw_positions(self, stats: LiveStats) -> None:
        rates = stats.acceptance_by_position()
        if self.position_set.count() != len(rates):
            self.position_set.remove(0, self.position_set.count())
            self.position_set.append([100 * r for r in rates])
            self._label_positions(len(rates))
        else:
            for i, r in enumerate(rates):
                self.position_set.replace(i, 100 * r)

    def _label_positions(self, count: int) -> None:
        for label in self.pos_x.categoriesLabels():
            self.pos_x.remove(label)
        self.pos_x.setRange(-0.5, max(count, 1) - 0.5)
        self.pos_x.setStartValue(-0.5)
        for position in position_labels(count):
            self.pos_x.append(str(position), position - 1)

    def point_counts(self) -> dict[str, int]:
        return {"tps": self.tps_series.count(), "round_acceptance": self.round_series.count(),
                "rolling_acceptance": self.rolling_series.count(), "positions": self.position_set.count()}

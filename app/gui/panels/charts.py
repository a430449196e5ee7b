"""Three QtCharts fed from LiveStats on a timer: tokens/sec over the generation, acceptance per
round and rolling, acceptance by draft position."""

from __future__ import annotations

from PySide6.QtCharts import (QBarCategoryAxis, QBarSeries, QBarSet, QChart, QChartView, QLineSeries,
                              QScatterSeries, QValueAxis)
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.gui.widgets import theme
from app.gui.runtime.live_stats import LiveStats, thin

CHART_MIN_HEIGHT = 130   # three charts under the counters still fit a 1280x800 screen
MAX_ROUND_TICKS = 6
SECONDS_HEADROOM = 1.5   # the seconds axis grows in steps with room to spare, not on every repaint


def round_axis_span(last_round: int) -> tuple[int, int]:
    """(top, tick count) for a round axis from 0 to at least ``last_round``: a whole number of
    rounds between ticks, so no two ticks show the same integer label."""
    last = max(last_round, 1)
    step = -(-last // (MAX_ROUND_TICKS - 1))
    intervals = -(-last // step)
    return step * intervals, intervals + 1


def _chart(title: str) -> QChart:
    chart = QChart()
    chart.setTitle(title)
    font = QFont()
    font.setPointSize(9)
    font.setBold(True)
    chart.setTitleFont(font)
    chart.setTitleBrush(QColor(theme.TEXT))
    chart.setBackgroundRoundness(6)
    chart.setMargins(QMargins(4, 2, 4, 2))
    chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
    chart.legend().setFont(QFont(font.family(), 8))
    chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)
    return chart


def _axis(title: str, low: float, high: float, fmt: str = "%.0f") -> QValueAxis:
    axis = QValueAxis()
    axis.setRange(low, high)
    axis.setLabelFormat(fmt)
    axis.setTitleText(title)
    small = QFont()
    small.setPointSize(7)
    axis.setLabelsFont(small)
    axis.setTitleFont(small)
    axis.setGridLineColor(QColor(theme.BORDER))
    return axis


def _line(name: str, colour: str, width: float = 2.0) -> QLineSeries:
    series = QLineSeries()
    series.setName(name)
    series.setPen(QPen(QColor(colour), width))
    return series


def _view(chart: QChart) -> QChartView:
    view = QChartView(chart)
    view.setRenderHint(QPainter.RenderHint.Antialiasing)
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
        chart.legend().hide()
        self.tps_series = _line("tok/s", theme.MAIN_LINE)
        chart.addSeries(self.tps_series)
        self.tps_x, self.tps_y = _axis("seconds", 0, 1, "%g"), _axis("", 0, 10)
        self._attach(chart, self.tps_series, self.tps_x, self.tps_y)
        self.tps_view = _view(chart)

    def _build_acceptance(self) -> None:
        chart = _chart("Acceptance rate")
        self.round_series = QScatterSeries()
        self.round_series.setName("per round")
        self.round_series.setMarkerSize(5)
        self.round_series.setColor(QColor(theme.DRAFT_LINE))
        self.round_series.setBorderColor(QColor(theme.DRAFT_LINE))
        self.rolling_series = _line("rolling", theme.ROLLING_LINE)
        chart.addSeries(self.round_series)
        chart.addSeries(self.rolling_series)
        self.acc_x, self.acc_y = _axis("round", 0, 1, "%d"), _axis("%", 0, 100)
        self._set_round_range(0)
        self._attach(chart, self.round_series, self.acc_x, self.acc_y)
        self._attach(chart, self.rolling_series, self.acc_x, self.acc_y)
        self.acceptance_view = _view(chart)

    def _build_positions(self) -> None:
        chart = _chart("Acceptance by draft position")
        chart.legend().hide()
        self.position_set = QBarSet("accepted %")
        self.position_set.setColor(QColor(theme.DRAFT_LINE))
        self.position_series = QBarSeries()
        self.position_series.append(self.position_set)
        chart.addSeries(self.position_series)
        self.pos_x = QBarCategoryAxis()
        small = QFont()
        small.setPointSize(7)
        self.pos_x.setLabelsFont(small)
        self.pos_y = _axis("%", 0, 100)
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
        for series in (self.tps_series, self.round_series, self.rolling_series):
            series.clear()
        self.position_set.remove(0, self.position_set.count())
        self.pos_x.clear()

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
            self.tps_y.setRange(0, max(v for _, v in points) * 1.15 or 1)

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
            self.pos_x.clear()
            self.pos_x.append([str(i + 1) for i in range(len(rates))])
        else:
            for i, r in enumerate(rates):
                self.position_set.replace(i, 100 * r)

    def point_counts(self) -> dict[str, int]:
        return {"tps": self.tps_series.count(), "round_acceptance": self.round_series.count(),
                "rolling_acceptance": self.rolling_series.count(), "positions": self.position_set.count()}

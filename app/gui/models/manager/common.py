"""Table helpers and colours the model manager's views share."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem

from app.gui.widgets.plain import plain_tooltip

FIT_COLORS = {"fits": "#1a7f37", "tight": "#bf8700", "too large": "#a4161a", "unknown": "#6a737d"}


def item(text: str, data=None, color: str | None = None, tooltip: str | None = None) -> QTableWidgetItem:
    """A read-only cell; ``data`` goes in the user role (a path, a repository id)."""
    cell = QTableWidgetItem(text)
    cell.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if data is not None:
        cell.setData(Qt.ItemDataRole.UserRole, data)
    if color:
        cell.setForeground(QColor(color))
    if tooltip:
        cell.setToolTip(plain_tooltip(tooltip))
    return cell


def fit_item(verdict: str, detail: str) -> QTableWidgetItem:
    return item(verdict, color=FIT_COLORS[verdict], tooltip=detail)


def table(headers: list[str], stretch: int = 0) -> QTableWidget:
    """A read-only table that selects one whole row at a time."""
    widget = QTableWidget(0, len(headers))
    widget.setHorizontalHeaderLabels(headers)
    widget.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    widget.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    widget.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    widget.verticalHeader().hide()
    widget.setAlternatingRowColors(True)
    header = widget.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return widget


def fill(widget: QTableWidget, rows: list[list[QTableWidgetItem]]) -> None:
    widget.setRowCount(0)
    widget.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            widget.setItem(r, c, cell)


def selected_data(widget: QTableWidget):
    """The user-role data of the selected row's first cell; None when nothing is selected."""
    model = widget.selectionModel()
    rows = model.selectedRows() if model else []
    return widget.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole) if rows else None


def select_data(widget: QTableWidget, data: str) -> None:
    for row in range(widget.rowCount()):
        if widget.item(row, 0).data(Qt.ItemDataRole.UserRole) == data:
            widget.selectRow(row)
            return


def section_title(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("sectionTitle")
    return label


def chosen_text(main: str, draft: str) -> str:
    return Path(main).name + (f" with draft {Path(draft).name}" if draft else " without a draft")

"""The window's three columns side by side: the conversation list, the chat and the side panel.

The chat stays the widest column at any width: the side columns keep the widths the user gave them
(dragging a handle, remembered across restarts) until the chat would be less than CHAT_LEAD times the
wider of them; then the wider side gives way first, down to its minimum. At the window's minimum width
a code block still gets more room than either panel. Either side column can be hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QSplitter, QWidget

CHAT_LEAD = 1.2   # the chat at least this many times as wide as either side column, where minimums allow


@dataclass(frozen=True)
class ColumnState:
    """What the window remembers: each side column's width (as last set, before giving way) and whether it shows."""

    list_width: int = 240
    side_width: int = 440
    list_shown: bool = True
    side_shown: bool = True


def side_cap(total: int, wanted: list[int]) -> int:
    """The widest a side column may be in ``total`` pixels: the largest ``cap`` with the chat, what the
    sides leave at ``min(width, cap)`` each, at least CHAT_LEAD times ``cap``. The chat's room falls as
    the cap rises, so a binary search finds it."""
    low, high = 0, max(wanted, default=0)
    while low < high:
        cap = (low + high + 1) // 2
        if total - sum(min(w, cap) for w in wanted) >= CHAT_LEAD * cap:
            low = cap
        else:
            high = cap - 1
    return low


def fit_columns(total: int, wanted: tuple[int, int], minimum: tuple[int, int],
                shown: tuple[bool, bool]) -> tuple[int, int, int]:
    """(list, chat, side) widths for ``total`` pixels: each shown side its wanted width up to
    ``side_cap``, never below its minimum; a hidden side 0; the chat the rest."""
    widths = [w if on else 0 for w, on in zip(wanted, shown)]
    cap = side_cap(total, widths)
    left, right = (max(min(w, cap), low) if on else 0 for w, low, on in zip(widths, minimum, shown))
    return left, total - left - right, right


class Columns(QSplitter):
    """A horizontal splitter of (list, chat, side) that keeps the chat the widest column."""

    def __init__(self, conversations: QWidget, chat: QWidget, side: QWidget, parent: QWidget | None = None):
        super().__init__(Qt.Orientation.Horizontal, parent)
        for widget in (conversations, chat, side):
            self.addWidget(widget)
        self.setStretchFactor(1, 1)
        self.setChildrenCollapsible(False)
        self._wanted = [ColumnState.list_width, ColumnState.side_width]
        self.splitterMoved.connect(self._dragged)

    # --- what the user sets ------------------------------------------------------------------------

    def set_shown(self, index: int, on: bool) -> None:
        """Show or hide a side column (0: the conversation list, 1: the side panel)."""
        self._side(index).setVisible(on)
        self.fit()

    def is_shown(self, index: int) -> bool:
        return not self._side(index).isHidden()

    def state(self) -> ColumnState:
        return ColumnState(self._wanted[0], self._wanted[1], self.is_shown(0), self.is_shown(1))

    def restore(self, state: ColumnState) -> None:
        self._wanted = [state.list_width, state.side_width]
        self._side(0).setVisible(state.list_shown)
        self._side(1).setVisible(state.side_shown)
        self.fit()

    # --- keeping the rule --------------------------------------------------------------------------

    def fit(self) -> None:
        """Lay the columns out by ``fit_columns`` in the room the splitter has now."""
        total = sum(self.sizes())
        if total <= 0:   # not laid out yet: the first resize fits it
            return
        minimum = tuple(_minimum_width(self._side(i)) for i in (0, 1))
        shown = (self.is_shown(0), self.is_shown(1))
        self.setSizes(list(fit_columns(total, tuple(self._wanted), minimum, shown)))

    def _dragged(self, _pos: int, _index: int) -> None:
        """A handle was dragged: the side columns' new widths, within the rule, are what the user wants
        from now on (a side dragged past its cap keeps the cap, rather than jumping wider later)."""
        self._take_shown_widths()
        self.fit()
        self._take_shown_widths()

    def _take_shown_widths(self) -> None:
        sizes = self.sizes()
        for i, size in ((0, sizes[0]), (1, sizes[2])):
            if self.is_shown(i) and size > 0:
                self._wanted[i] = size

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit()

    def _side(self, index: int) -> QWidget:
        return self.widget(0 if index == 0 else 2)


def _minimum_width(widget: QWidget) -> int:
    """The narrowest QSplitter lets a widget be: its minimum width if set, else its layout's minimum."""
    return widget.minimumWidth() or widget.minimumSizeHint().width()

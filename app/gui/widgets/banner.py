"""An inline message strip above the chat: errors, warnings and results, never a modal box.
Messages often quote file and model names, so they are shown as plain text."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QToolButton

from app.gui.widgets.plain import plain_label


class Banner(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("banner")
        self.kind = ""
        self._label = plain_label()
        self._label.setWordWrap(True)
        self._label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._action: Callable[[], None] | None = None
        self.action_button = QToolButton()   # "Undo" and the like, for a message that offers one
        self.action_button.setObjectName("link")
        self.action_button.clicked.connect(self._act)
        self.action_button.hide()
        close = QToolButton()
        close.setObjectName("link")
        close.setText("Dismiss")
        close.clicked.connect(self.clear)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 8, 8)
        layout.addWidget(self._label, 1)
        layout.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def show_message(self, text: str, kind: str = "error", action: tuple[str, Callable[[], None]] | None = None) -> None:
        """``kind`` is "error", "warning" or "info"; it picks the colours from the style sheet.
        ``action``: (label, what it does) for a button beside the message (it clears the message)."""
        self._action = action[1] if action else None
        self.action_button.setText(action[0] if action else "")
        self.action_button.setVisible(action is not None)
        self.kind = kind
        self.setProperty("kind", kind)
        self.style().unpolish(self)
        self.style().polish(self)
        self._label.setText(text)
        self.show()

    def text(self) -> str:
        return self._label.text() if not self.isHidden() else ""

    def clear_if(self, kind: str) -> None:
        """Clear the message shown if it is of ``kind`` ("" clears any)."""
        if not kind or self.kind == kind:
            self.clear()

    def withdraw(self, text: str) -> None:
        """Clear ``text`` if it is still the message shown: what it said is no longer true (a load's
        warning once another pair is loaded), while a message shown since stays."""
        if text and self.text() == text:
            self.clear()

    def replace(self, old: str, new: str) -> None:
        """Show ``new`` in place of ``old`` if ``old`` is still the message shown: a progress line moves
        on, and one the user dismissed (or another message replaced) stays away."""
        if old and self.text() == old:
            self._label.setText(new)

    def _act(self) -> None:
        action = self._action
        self.clear()
        if action is not None:
            action()

    def clear(self) -> None:
        self._action = None
        self.action_button.hide()
        self.kind = ""
        self._label.clear()
        self.hide()

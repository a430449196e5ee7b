"""An inline message strip above the chat: errors, warnings and results, never a modal box.
Messages often quote file and model names, so they are shown as plain text."""

from __future__ import annotations

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
        close = QToolButton()
        close.setObjectName("link")
        close.setText("Dismiss")
        close.clicked.connect(self.clear)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 8, 8)
        layout.addWidget(self._label, 1)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def show_message(self, text: str, kind: str = "error") -> None:
        """``kind`` is "error", "warning" or "info"; it picks the colours from the style sheet."""
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

    def clear(self) -> None:
        self.kind = ""
        self._label.clear()
        self.hide()

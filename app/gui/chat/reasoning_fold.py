"""A thinking model's reasoning, folded above its answer: "Thinking…" while it streams, "Thought for
12 s" after; a click opens or closes it. Closed, its text is not even rendered."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QSizePolicy, QToolButton, QVBoxLayout, QWidget

from app.gui.chat import render


def fold_title(thinking: bool, seconds: float | None, opened: bool) -> str:
    """'▸ Thinking…' while the model thinks, then '▸ Thought for 12 s' (▾ when open)."""
    arrow = "▾" if opened else "▸"
    if thinking:
        return f"{arrow} Thinking…"
    if seconds is None:
        return f"{arrow} Reasoning"
    if seconds < 1:
        return f"{arrow} Thought for less than a second"
    return f"{arrow} Thought for {seconds:.0f} s" if seconds >= 10 else f"{arrow} Thought for {seconds:.1f} s"


class ReasoningFold(QWidget):
    toggled = Signal(bool)   # opened

    def __init__(self, body: QWidget, parent=None):
        super().__init__(parent)
        self.text = ""
        self.seconds: float | None = None
        self.thinking = False
        self.opened = False
        self._rendered: str | None = None
        self.button = QToolButton()
        self.button.setObjectName("reasoningToggle")
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.button.setToolTip("Show or hide the model's reasoning")
        self.button.clicked.connect(lambda: self.set_open(not self.opened))
        self.body = body   # a MessageBody (message_view.py): a browser as tall as its text
        self.body.setObjectName("reasoningBody")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 4)
        layout.setSpacing(2)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.body)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._show()

    def set_reasoning(self, text: str, seconds: float | None, thinking: bool) -> None:
        self.text, self.seconds, self.thinking = text or "", seconds, thinking
        self._show()

    def set_open(self, opened: bool) -> None:
        if opened != self.opened:
            self.opened = opened
            self._show()
            self.toggled.emit(opened)

    def _show(self) -> None:
        self.setVisible(bool(self.text) or self.thinking)
        self.button.setText(fold_title(self.thinking, self.seconds, self.opened))
        self.body.setVisible(self.opened and bool(self.text))
        if self.opened and self._rendered != self.text:
            self.body.setHtml(render.render_markdown(self.text))
            self._rendered = self.text

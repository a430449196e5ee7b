"""Strings from files, models and the network shown as what they are: plain text, never rich text.

QLabel, QMessageBox and tool tips guess rich text from a leading tag (Qt.mightBeRichText), and rich
text loads the images and style sheets it names: a GGUF whose name is ``<img src="/dev/zero">``
would make the window read that file. Every widget here that shows such a string uses these."""

from __future__ import annotations

import html

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QMessageBox, QSizePolicy, QWidget


def plain_label(text: str = "") -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setText(text)
    return label


class ElidedLabel(QLabel):
    """One line of plain text cut with "…" to the width it is given, so a long text never widens
    the window; the whole text is in its tool tip."""

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._full = ""
        self.set_full_text(text)

    @property
    def full_text(self) -> str:
        return self._full

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.setToolTip(plain_tooltip(text))
        self._elide()

    def minimumSizeHint(self) -> QSize:
        return QSize(40, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        self.setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(self.width(), 40)))


def plain_tooltip(text: str) -> str:
    """A tool tip that shows ``text`` literally (tool tips have no plain-text switch)."""
    return f'<p style="white-space:pre-wrap;">{html.escape(text)}</p>' if text else ""


def ask(parent: QWidget, title: str, text: str) -> bool:
    """A Yes/No question whose text is shown literally."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    return box.exec() == QMessageBox.StandardButton.Yes

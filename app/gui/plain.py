"""Strings from files, models and the network shown as what they are: plain text, never rich text.

QLabel, QMessageBox and tool tips guess rich text from a leading tag (Qt.mightBeRichText), and rich
text loads the images and style sheets it names: a GGUF whose name is ``<img src="/dev/zero">``
would make the window read that file. Every widget here that shows such a string uses these."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget


def plain_label(text: str = "") -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setText(text)
    return label


def plain_tooltip(text: str) -> str:
    """A tool tip that shows ``text`` literally (tool tips have no plain-text switch)."""
    return f'<p style="white-space:pre-wrap;">{html.escape(text)}</p>' if text else ""


def ask(parent: QWidget, title: str, text: str) -> bool:
    """A Yes/No question whose text is shown literally."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    return box.exec() == QMessageBox.StandardButton.Yes

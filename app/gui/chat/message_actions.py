"""What a message offers besides its text: ‹ 2/3 › between its versions, and editing a question in
place (message_view.py holds them in each message's frame)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QSizePolicy, QToolButton, QVBoxLayout,
                               QWidget)

ENTER_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)
EDIT_LINES = (3, 12)   # the edit box grows with its text between these many lines, then scrolls


def link_button(text: str, tip: str) -> QToolButton:
    """A flat button that reads as a link (the theme's QToolButton#link)."""
    button = QToolButton()
    button.setObjectName("link")
    button.setText(text)
    button.setToolTip(tip)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    return button


class VersionSwitch(QWidget):
    """‹ 2/3 ›: which version of a message is shown, and the way to the one before or after. Hidden
    for a message with one version."""

    step_requested = Signal(int)   # -1: the version before, +1: the one after

    def __init__(self, parent=None):
        super().__init__(parent)
        self.previous = link_button("‹", "The version before")
        self.next = link_button("›", "The version after")
        self.label = QLabel()
        self.label.setObjectName("footer")
        self.previous.clicked.connect(lambda: self.step_requested.emit(-1))
        self.next.clicked.connect(lambda: self.step_requested.emit(1))
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        for widget in (self.previous, self.label, self.next):
            layout.addWidget(widget)
        self.version, self.versions = 1, 1
        self.set_versions(1, 1)

    def set_versions(self, version: int, versions: int) -> None:
        self.version, self.versions = version, versions
        self.label.setText(f"{version}/{versions}")
        self.previous.setEnabled(version > 1)
        self.next.setEnabled(version < versions)
        self.setVisible(versions > 1)


class _EditBox(QPlainTextEdit):
    """Enter sends and Shift+Enter starts a line, as in the message box; Esc cancels. Both keys are
    taken before the window's shortcuts (Esc there stops an answer)."""

    submitted = Signal()
    cancelled = Signal()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ShortcutOverride and event.key() in (Qt.Key.Key_Escape, *ENTER_KEYS):
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.cancelled.emit()
        elif event.key() in ENTER_KEYS and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
        else:
            super().keyPressEvent(event)


class MessageEditor(QWidget):
    """A question edited in place: Send answers the edited text as a new version (a branch), Cancel
    leaves the message as it was."""

    submitted = Signal(str)
    cancelled = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.box = _EditBox()
        self.box.setTabChangesFocus(True)
        self.box.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.box.document().documentLayout().documentSizeChanged.connect(lambda _size: self._fit())
        self.send = QPushButton("Send")
        self.send.setObjectName("primary")
        self.send.setToolTip("Answer the edited message; the earlier version stays (‹ ›)")
        cancel = QPushButton("Cancel")
        self.send.clicked.connect(self._submit)
        self.box.submitted.connect(self._submit)
        cancel.clicked.connect(self.cancelled)
        self.box.cancelled.connect(self.cancelled)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(cancel)
        buttons.addWidget(self.send)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.box)
        layout.addLayout(buttons)

    def _fit(self) -> None:
        """As tall as its text, within EDIT_LINES: left to itself it took the whole chat's height."""
        least, most = EDIT_LINES
        lines = min(max(self.box.document().documentLayout().documentSize().height(), least), most)
        margins = self.box.contentsMargins()
        self.box.setFixedHeight(int(lines * self.box.fontMetrics().lineSpacing()) + margins.top() + margins.bottom()
                                + 2 * int(self.box.document().documentMargin()))

    def start(self, text: str) -> None:
        self.box.setPlainText(text)
        self._fit()
        self.box.setFocus(Qt.FocusReason.OtherFocusReason)
        self.box.selectAll()

    def text(self) -> str:
        return self.box.toPlainText()

    def _submit(self) -> None:
        if self.send.isEnabled():
            self.submitted.emit(self.box.toPlainText())

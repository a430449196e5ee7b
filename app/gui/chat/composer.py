"""Where the user writes: a per-conversation system prompt, the message box and its buttons, text files
attached to the message (a button, or dropped on the box: attachments.py), and the conversation's
"Think" switch where the model's template has one."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (QCheckBox, QFileDialog, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton,
                               QVBoxLayout, QWidget)

from app.gui.chat.attachments import AttachmentBar, AttachmentError, message_with, read_attachment
from app.gui.widgets import theme


DROP_EVENTS = (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop)


class Composer(QWidget):
    send_requested = Signal(str)
    stop_requested = Signal()
    regenerate_requested = Signal()
    system_prompt_edited = Signal(str)
    colour_tokens_toggled = Signal(bool)
    thinking_toggled = Signal(bool)
    attach_failed = Signal(str)          # a file could not be attached: why, for the user

    def __init__(self, parent=None):
        super().__init__(parent)
        self.system_prompt = QLineEdit()
        self.system_prompt.setPlaceholderText("System prompt for this conversation")
        self.system_prompt.editingFinished.connect(lambda: self.system_prompt_edited.emit(self.system_prompt.text()))
        self.input = QPlainTextEdit()
        self.input.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line)")
        self.input.setFixedHeight(84)
        self.input.setTabChangesFocus(True)   # Tab leaves the box, as in a browser's; a tab is not typed
        self.input.installEventFilter(self)
        self.input.viewport().installEventFilter(self)   # drags and drops arrive at the box's viewport
        self.attachments = AttachmentBar()
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip("Attach text files (code, logs, Markdown) to the message; or drop them on the box")
        self.attach_button.clicked.connect(self.browse_attachments)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("primary")
        self.send_button.clicked.connect(self.submit)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("danger")
        self.stop_button.clicked.connect(self.stop_requested)
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.setToolTip("Answer the last message again")
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        self.colour_tokens = QCheckBox("Colour tokens by origin")
        self.colour_tokens.toggled.connect(self.colour_tokens_toggled)
        self.think = QCheckBox("Think")
        self.think.setToolTip("Let the model reason before it answers (its reasoning is shown folded above the "
                              "answer). Kept per conversation.")
        self.think.setChecked(True)
        self.think.hide()   # shown for a model whose chat template can switch thinking on and off
        self.think.clicked.connect(self.thinking_toggled)
        self._layout()
        self.set_generating(False)

    def _layout(self) -> None:
        # short, so that the row fits a 1000 px window beside Regenerate ("accepted draft" was cut there)
        legend = QLabel(
            f'<span style="background-color:{theme.DRAFT_BG};">&nbsp;draft&nbsp;</span>&nbsp;'
            f'<span style="background-color:{theme.SUFFIX_BG};">&nbsp;past&nbsp;</span>&nbsp;'
            f'<span style="background-color:{theme.MAIN_BG};">&nbsp;main&nbsp;</span>')
        legend.setToolTip("Green: draft tokens the main model accepted. Sand: accepted tokens drafted from past "
                          "answers (the suffix index). Blue: tokens the main model wrote itself.")
        legend.setObjectName("statName")
        self.legend = legend
        self.colour_tokens.toggled.connect(legend.setVisible)
        legend.hide()
        options = QHBoxLayout()
        options.addWidget(self.think)
        options.addWidget(self.colour_tokens)
        options.addWidget(legend)
        options.addStretch(1)
        options.addWidget(self.regenerate_button)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.attach_button)
        buttons.addStretch(1)
        row.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 6, 16, 12)
        layout.setSpacing(6)
        system_row = QHBoxLayout()
        system_label = QLabel("System prompt")
        system_label.setObjectName("statName")
        system_row.addWidget(system_label)
        system_row.addWidget(self.system_prompt, 1)
        layout.addLayout(system_row)
        layout.addWidget(self.attachments)
        layout.addLayout(row)
        layout.addLayout(options)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched in (self.input, self.input.viewport()) and event.type() in DROP_EVENTS and event.mimeData().hasUrls():
            return self._take_drop(event)
        if watched is self.input and event.type() == QEvent.Type.KeyPress:
            key_event: QKeyEvent = event
            if key_event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                    key_event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
                self.submit()
                return True
        return super().eventFilter(watched, event)

    def _take_drop(self, event) -> bool:
        """Files dropped on the message box are attached, not pasted as their paths."""
        files = [url.toLocalFile() for url in event.mimeData().urls() if url.isLocalFile()]
        if not files:
            return False
        event.acceptProposedAction()
        if event.type() == QEvent.Type.Drop:
            self.attach(files)
        return True

    def browse_attachments(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach text files", "",
                                                "Text files (*.txt *.md *.py *.js *.ts *.json *.log *.c *.h *.cpp "
                                                "*.rs *.go *.java *.sh *.yaml *.yml *.toml *.html *.css *.sql);;All files (*)")
        self.attach(paths)

    def attach(self, paths: list[str]) -> None:
        for path in paths:
            try:
                self.attachments.add(read_attachment(path))
            except AttachmentError as exc:
                self.attach_failed.emit(str(exc))

    def submit(self) -> None:
        text = self.input.toPlainText().strip()
        if (text or self.attachments.attachments) and self.send_button.isEnabled():
            self.send_requested.emit(message_with(text, self.attachments.attachments))

    def focus_input(self) -> None:
        self.input.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def clear_input(self) -> None:
        """After a message is sent: the box and its attachments start empty."""
        self.input.clear()
        self.attachments.clear()

    def set_system_prompt(self, text: str) -> None:
        self.system_prompt.setText(text)

    def system_prompt_text(self) -> str:
        return self.system_prompt.text()

    def set_colour_tokens(self, on: bool) -> None:
        """Show the choice; the checkbox signals only a change."""
        if self.colour_tokens.isChecked() != on:
            self.colour_tokens.setChecked(on)

    def set_thinking(self, on: bool) -> None:
        """Show the conversation's switch; the checkbox signals only a click."""
        self.think.setChecked(on)

    def set_thinking_available(self, available: bool) -> None:
        self.think.setVisible(available)

    def toggle_colour_tokens(self) -> None:
        self.colour_tokens.toggle()

    def set_send_enabled(self, on: bool) -> None:
        """Send is off while the models load or an answer streams."""
        self.send_button.setEnabled(on)

    def set_generating(self, generating: bool) -> None:
        self.send_button.setEnabled(not generating)
        self.stop_button.setEnabled(generating)
        self.regenerate_button.setEnabled(not generating)

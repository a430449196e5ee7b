"""Where the user writes: a per-conversation system prompt, the message box and its buttons, and the
conversation's "Think" switch where the model's template has one."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.gui.widgets import theme


class Composer(QWidget):
    send_requested = Signal(str)
    stop_requested = Signal()
    regenerate_requested = Signal()
    system_prompt_edited = Signal(str)
    colour_tokens_toggled = Signal(bool)
    thinking_toggled = Signal(bool)

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
            f'<span style="background-color:{theme.MAIN_BG};">&nbsp;main&nbsp;</span>')
        legend.setToolTip("Green: draft tokens the main model accepted. Blue: tokens the main model wrote itself.")
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
        layout.addLayout(row)
        layout.addLayout(options)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.input and event.type() == QEvent.Type.KeyPress:
            key_event: QKeyEvent = event
            if key_event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                    key_event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
                self.submit()
                return True
        return super().eventFilter(watched, event)

    def submit(self) -> None:
        text = self.input.toPlainText().strip()
        if text and self.send_button.isEnabled():
            self.send_requested.emit(text)

    def focus_input(self) -> None:
        self.input.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def clear_input(self) -> None:
        self.input.clear()

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

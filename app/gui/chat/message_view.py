"""The chat view: one framed widget per message, Markdown rendered, growing as the answer streams; a
thinking model's reasoning folded above its answer (reasoning_fold.py); a question edited in place,
‹ 2/3 › between a message's versions, regenerating and deleting (message_actions.py)."""

from __future__ import annotations

from PySide6.QtCore import QSizeF, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QMessageBox, QScrollArea, QSizePolicy, QTextBrowser,
                               QVBoxLayout, QWidget)

from app.gui.chat import render
from app.gui.chat.message_actions import MessageEditor, VersionSwitch, link_button
from app.gui.chat.reasoning_fold import ReasoningFold
from app.gui.runtime.live_stats import format_footer
from app.storage.conversations import StoredMessage

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}


class MessageBody(QTextBrowser):
    """A borderless, scroll-less browser as tall as its document. It loads no resource: what it
    shows comes from models and users, and an image or style sheet there must not read a file."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("messageBody")
        self.setOpenLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)

    def loadResource(self, kind: int, _name: QUrl):
        return render.inert_resource(kind)

    def _fit(self, size: QSizeF) -> None:
        self.setFixedHeight(int(size.height()) + 4)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit(self.document().size())


class MessageWidget(QFrame):
    compare_requested = Signal(int)   # message id
    regenerate_requested = Signal(int)   # message id: a new version of this answer
    edit_submitted = Signal(int, str)    # message id, the edited text: a new version of this question
    version_requested = Signal(int, int)   # message id, -1 or +1: show the version before or after
    delete_requested = Signal(int)       # message id

    def __init__(self, message_id: int | None, role: str, text: str = "", stats: dict | None = None,
                 runs: list | tuple = (), colour_tokens: bool = False, reasoning: str | None = None,
                 versions: tuple[int, int] = (1, 1), parent=None):
        super().__init__(parent)
        self.message_id = message_id
        self.role = role
        self.text = text
        self.runs = [list(r) for r in runs]
        self.stats = dict(stats or {})
        self.colour_tokens = colour_tokens
        self.streaming = False
        self.status = "generating…"   # the footer while the answer streams
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        self._build()
        self.versions.set_versions(*versions)
        self.reasoning.set_reasoning(reasoning or "", self.stats.get("thinking_s"), False)
        self._render()

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 10)
        layout.setSpacing(4)
        header = QHBoxLayout()
        role = QLabel(ROLE_NAMES.get(self.role, self.role))
        role.setObjectName("role")
        header.addWidget(role)
        header.addStretch(1)
        answer = self.role == "assistant"
        # reading actions above, the versions and changing actions below: one row of them all did not
        # fit a narrow chat column
        self.compare_button = self._action("Compare", "Regenerate greedily with and without the draft and measure "
                                           "the speedup", lambda: self.compare_requested.emit(self.message_id or 0), answer)
        self.copy_button = self._action("Copy", "Copy this message", self.copy_text)
        header.addWidget(self.compare_button)
        header.addWidget(self.copy_button)
        layout.addLayout(header)
        self.reasoning = ReasoningFold(MessageBody())
        layout.addWidget(self.reasoning)
        self.body = MessageBody()
        self.body.anchorClicked.connect(self._anchor_clicked)
        layout.addWidget(self.body)
        self.editor = MessageEditor()
        self.editor.submitted.connect(lambda text: self.edit_submitted.emit(self.message_id or 0, text))
        self.editor.cancelled.connect(self.stop_editing)
        self.editor.hide()
        layout.addWidget(self.editor)
        self.footer = QLabel()
        self.footer.setObjectName("footer")
        self.footer.setWordWrap(True)  # unwrapped, its one line set the message's least width past a narrow chat column
        self.edit_button = self._action("Edit", "Edit this message and answer it again (the earlier version stays)",
                                        self.start_editing, self.role == "user")
        self.regenerate_button = self._action("Regenerate", "Answer again (this answer stays as a version: ‹ ›)",
                                              lambda: self.regenerate_requested.emit(self.message_id or 0),
                                              self.role == "assistant")
        self.delete_button = self._action("×", "Delete this message and what follows it",
                                          lambda: self.delete_requested.emit(self.message_id or 0))
        self.versions = VersionSwitch()
        self.versions.step_requested.connect(lambda step: self.version_requested.emit(self.message_id or 0, step))
        layout.addWidget(self.footer)
        bottom = QHBoxLayout()   # its own row: beside the footer it made a narrow chat column too narrow
        bottom.addWidget(self.versions)
        bottom.addStretch(1)
        for button in (self.edit_button, self.regenerate_button, self.delete_button):
            bottom.addWidget(button)
        layout.addLayout(bottom)

    @staticmethod
    def _action(text: str, tip: str, slot, shown: bool = True):
        button = link_button(text, tip)
        button.clicked.connect(slot)
        button.setVisible(shown)
        return button

    # --- versions, editing -----------------------------------------------------------------------

    def set_versions(self, version: int, versions: int) -> None:
        self.versions.set_versions(version, versions)

    def set_actions_enabled(self, on: bool) -> None:
        """Off while an answer is written: it belongs to the path shown when it started."""
        for widget in (self.versions, self.edit_button, self.regenerate_button, self.delete_button, self.editor.send):
            widget.setEnabled(on)
        if on:
            self.versions.set_versions(self.versions.version, self.versions.versions)   # its ends stay off

    def start_editing(self) -> None:
        self.editor.start(self.text)
        self.editor.show()
        self.body.hide()
        for button in (self.edit_button, self.delete_button):   # the editor's Cancel and Send stand in
            button.hide()

    def stop_editing(self) -> None:
        self.editor.hide()
        self.body.show()
        for button in (self.edit_button, self.delete_button):
            button.show()

    @property
    def editing(self) -> bool:
        return not self.editor.isHidden()

    # --- content -------------------------------------------------------------------------------

    def set_content(self, text: str, runs: list | tuple | None = None) -> None:
        self.text = text
        if runs is not None:
            self.runs = [list(r) for r in runs]
        self._render()

    def set_reasoning(self, text: str, seconds: float | None, thinking: bool = False) -> None:
        """The reasoning above the answer: ``thinking`` while the model is still at it (the answer's
        "…" waits hidden until then)."""
        was_thinking = self.reasoning.thinking
        self.reasoning.set_reasoning(text, seconds, thinking)
        if thinking != was_thinking:
            self._render()

    def set_stats(self, stats: dict) -> None:
        self.stats = dict(stats)
        self._render_footer()

    def set_colour_tokens(self, on: bool) -> None:
        if on != self.colour_tokens:
            self.colour_tokens = on
            self._render()

    def set_status(self, text: str) -> None:
        if text != self.status:
            self.status = text
            self._render_footer()

    def set_streaming(self, on: bool) -> None:
        self.streaming = on
        self.compare_button.setEnabled(not on)
        self.regenerate_button.setEnabled(not on)
        self._render_footer()

    def showing_origins(self) -> bool:
        return self.colour_tokens and bool(self.runs) and self.role == "assistant"

    def _render(self) -> None:
        if self.showing_origins():
            html = render.render_runs(self.runs)
        elif self.text:
            html = render.render_plain(self.text) if self.role == "user" else render.render_markdown(self.text)
        else:
            html = '<p style="color:#6a737d;">…</p>' if self.streaming or self.role == "assistant" else ""
        self.body.setHtml(html)
        self.body.setVisible(bool(html) and not (self.reasoning.thinking and not self.text))
        self._render_footer()

    def _render_footer(self) -> None:
        text = self.status if self.streaming else format_footer(self.stats)
        self.footer.setText(text)
        self.footer.setVisible(bool(text))

    # --- copying -------------------------------------------------------------------------------

    def copy_text(self) -> None:
        QGuiApplication.clipboard().setText(self.text)

    def _anchor_clicked(self, url: QUrl) -> None:
        index = render.copy_code_index(url.toString())
        blocks = render.code_blocks(self.text) if index is not None else []
        if index is not None and index < len(blocks):
            QGuiApplication.clipboard().setText(blocks[index])


NOT_LOADED = "Pick a main model (and a draft) above and press Load,\nthen type below and press Enter."
LOADED = "Type a message below and press Enter."


class ChatView(QScrollArea):
    """Messages top to bottom; follows the end while the user has not scrolled away from it."""

    compare_requested = Signal(int)
    regenerate_requested = Signal(int)
    edit_submitted = Signal(int, str)
    version_requested = Signal(int, int)
    delete_requested = Signal(int)      # confirmed, when messages follow it

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        container = QWidget()
        container.setObjectName("central")
        self._layout = QVBoxLayout(container)
        self._layout.setContentsMargins(16, 16, 16, 16)
        self._layout.setSpacing(12)
        self._layout.addStretch(1)
        self._placeholder = QLabel(NOT_LOADED)
        self._placeholder.setObjectName("status")
        self._placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._layout.insertWidget(0, self._placeholder)
        self.setWidget(container)
        self.colour_tokens = False
        self.generating = False
        self._follow = True
        self.verticalScrollBar().valueChanged.connect(self._remember_follow)
        self.verticalScrollBar().rangeChanged.connect(self._keep_following)

    def messages(self) -> list[MessageWidget]:
        return [self._layout.itemAt(i).widget() for i in range(self._layout.count())
                if isinstance(self._layout.itemAt(i).widget(), MessageWidget)]

    def clear(self) -> None:
        for widget in self.messages():
            self._layout.removeWidget(widget)
            widget.deleteLater()
        self._placeholder.show()

    def add_message(self, message_id: int | None, role: str, text: str = "", stats: dict | None = None,
                    runs: list | tuple = (), reasoning: str | None = None,
                    versions: tuple[int, int] = (1, 1)) -> MessageWidget:
        widget = MessageWidget(message_id, role, text, stats, runs, self.colour_tokens, reasoning, versions)
        widget.compare_requested.connect(self.compare_requested)
        widget.regenerate_requested.connect(self.regenerate_requested)
        widget.edit_submitted.connect(self.edit_submitted)
        widget.version_requested.connect(self.version_requested)
        widget.delete_requested.connect(lambda message_id: self._confirm_delete(widget, message_id))
        widget.set_actions_enabled(not self.generating)
        self._layout.insertWidget(self._layout.count() - 1, widget)
        self._placeholder.hide()
        self._follow = True
        return widget

    def remove_message(self, widget: MessageWidget) -> None:
        self._layout.removeWidget(widget)
        widget.deleteLater()
        if not self.messages():
            self._placeholder.show()

    def set_loaded(self, loaded: bool) -> None:
        """What the empty chat asks for: a model to load, or a message."""
        self._placeholder.setText(LOADED if loaded else NOT_LOADED)

    def show_messages(self, messages: list[StoredMessage] | tuple[StoredMessage, ...]) -> None:
        self.clear()
        for message in messages:
            self.add_stored(message)

    def add_stored(self, message: StoredMessage) -> MessageWidget:
        return self.add_message(message.id, message.role, message.content, message.stats, message.pieces,
                                message.reasoning, (message.version, message.versions))

    def remove_from(self, message_id: int) -> None:
        """Take away the message ``message_id`` and every one after it (a new version goes there)."""
        shown = self.messages()
        ids = [w.message_id for w in shown]
        for widget in shown[ids.index(message_id):] if message_id in ids else ():
            self.remove_message(widget)

    def set_generating(self, on: bool) -> None:
        self.generating = on
        for widget in self.messages():
            widget.set_actions_enabled(not on)

    def _confirm_delete(self, widget: MessageWidget, message_id: int) -> None:
        """Deleting a message takes what follows it: with anything following, the user says yes first."""
        shown = self.messages()
        after = len(shown) - shown.index(widget) - 1 if widget in shown else 0
        if after and QMessageBox.question(
                self, "Delete messages", f"Delete this message and the {after} after it in this branch?"
                if after > 1 else "Delete this message and the one after it?") != QMessageBox.StandardButton.Yes:
            return
        self.delete_requested.emit(message_id)

    def remove_id(self, message_id: int) -> None:
        widget = self.find(message_id)
        if widget is not None:
            self.remove_message(widget)

    def start_answer(self, message_id: int) -> MessageWidget:
        """An empty assistant message that shows "generating…" until finish_answer."""
        widget = self.add_message(message_id, "assistant")
        widget.set_streaming(True)
        return widget

    def update_answer(self, message_id: int, text: str, runs: list | tuple, reasoning: str = "",
                      thinking_s: float | None = None, thinking: bool = False, status: str = "generating…") -> None:
        """The streaming answer so far; ``reasoning`` above it (``thinking``: still being written);
        ``status`` in its footer (how far the prompt is read, until the first token)."""
        widget = self.find(message_id)
        if widget is None:
            return
        widget.set_status(status)
        if reasoning or thinking:
            widget.set_reasoning(reasoning, thinking_s, thinking)
        if text != widget.text:
            widget.set_content(text, runs)

    def finish_answer(self, message: StoredMessage) -> None:
        widget = self.find(message.id)
        if widget is None:
            return
        widget.set_reasoning(message.reasoning or "", message.stats.get("thinking_s"))
        if message.content != widget.text or [list(r) for r in message.pieces] != widget.runs:
            widget.set_content(message.content, message.pieces)   # rendering a long answer takes a while
        widget.set_stats(message.stats)
        widget.set_versions(message.version, message.versions)
        widget.set_streaming(False)

    def update_stats(self, message: StoredMessage) -> None:
        widget = self.find(message.id)
        if widget is not None:
            widget.set_stats(message.stats)

    def find(self, message_id: int) -> MessageWidget | None:
        return next((w for w in self.messages() if w.message_id == message_id), None)

    def set_colour_tokens(self, on: bool) -> None:
        self.colour_tokens = on
        for widget in self.messages():
            widget.set_colour_tokens(on)

    def _remember_follow(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - 24

    def _keep_following(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            QTimer.singleShot(0, lambda: self.verticalScrollBar().setValue(self.verticalScrollBar().maximum()))

"""The list of conversations: search by title, new, rename (edit in place) and delete."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from app.storage.conversations import Conversation


class ConversationList(QWidget):
    selected = Signal(int)
    new_requested = Signal()
    renamed = Signal(int, str)
    delete_requested = Signal(int)
    search_changed = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.search_changed)
        self.list = QListWidget()
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)   # long titles end in "…"
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemChanged.connect(self._item_edited)
        self.new_button = QPushButton("New chat")
        self.new_button.setObjectName("primary")
        self.new_button.clicked.connect(self.new_requested)
        self.rename_button = QPushButton("Rename")
        self.rename_button.clicked.connect(self._start_rename)
        self.delete_button = QPushButton("Delete")
        self.delete_button.setObjectName("danger")
        self.delete_button.clicked.connect(self._delete_current)
        buttons = QHBoxLayout()
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.delete_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 12, 6, 12)
        layout.setSpacing(8)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)

    def show_conversations(self, conversations: list[Conversation], current: int | None) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for conv in conversations:
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            item.setToolTip(conv.title)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if conv.id == current:
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)

    def titles(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def search_text(self) -> str:
        return self.search.text()

    def set_search_text(self, text: str) -> None:
        self.search.setText(text)

    def select_next(self, step: int) -> None:
        """The conversation ``step`` rows down (up when negative), round the list; not while busy."""
        if self.list.isEnabled() and self.list.count():
            self.list.setCurrentRow((max(self.list.currentRow(), 0) + step) % self.list.count())

    def set_busy(self, busy: bool) -> None:
        """While an answer streams, the conversation cannot change under it."""
        for widget in (self.list, self.new_button, self.delete_button):
            widget.setEnabled(not busy)

    def _current_changed(self, item: QListWidgetItem | None, _previous) -> None:
        if item is not None:
            self.selected.emit(item.data(Qt.ItemDataRole.UserRole))

    def _item_edited(self, item: QListWidgetItem) -> None:
        title = item.text().strip()
        if title:
            self.renamed.emit(item.data(Qt.ItemDataRole.UserRole), title)

    def _start_rename(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def _delete_current(self) -> None:
        conversation_id = self.current_id()
        if conversation_id is not None:
            self.delete_requested.emit(conversation_id)

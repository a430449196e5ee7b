"""Text files attached to a message (code, logs, Markdown): read with a size limit and refused when they
are not text, shown as chips above the message box, and sent as part of the message, each under its
name in a fenced block. Their text becomes the prompt's, which is where prompt lookup copies from: an
answer that edits an attached file drafts from it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from app.models.diskspace import format_bytes

MAX_ATTACHMENT_BYTES = 512 * 1024   # a long source file or log; more rarely fits a local model's context
# the fence's language by extension, for the model's sake (a code block it recognises)
LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go", ".c": "c",
             ".h": "c", ".cpp": "cpp", ".hpp": "cpp", ".java": "java", ".sh": "sh", ".json": "json", ".yaml": "yaml",
             ".yml": "yaml", ".toml": "toml", ".md": "markdown", ".html": "html", ".css": "css", ".sql": "sql"}


class AttachmentError(Exception):
    """A file that cannot be attached; the message says why, for the user."""


@dataclass(frozen=True)
class Attachment:
    name: str
    text: str

    @property
    def size_label(self) -> str:
        return format_bytes(len(self.text.encode("utf-8")))


def read_attachment(path: str | Path) -> Attachment:
    """The file's text, or AttachmentError: unreadable, too large, or not text (not UTF-8, or NUL bytes)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_ATTACHMENT_BYTES:
            raise AttachmentError(f"{path.name} is {size:,} bytes; a message takes files of up to "
                                  f"{MAX_ATTACHMENT_BYTES // 1024} KiB ({MAX_ATTACHMENT_BYTES:,} bytes).")
        data = path.read_bytes()
    except OSError as exc:
        raise AttachmentError(f"{path.name} could not be read: {exc.strerror or exc}.") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttachmentError(f"{path.name} is not a text file (it is not UTF-8).") from None
    if "\x00" in text:
        raise AttachmentError(f"{path.name} is not a text file (it holds NUL bytes).")
    return Attachment(path.name, text)


def message_with(text: str, attachments: list[Attachment]) -> str:
    """The message as sent and stored: what was typed, then each file under its name in a fenced block
    (a fence longer than any run of backticks in the file, so the file cannot close it)."""
    parts = [text] if text else []
    for a in attachments:
        fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", a.text)), default=0))
        language = LANGUAGES.get(Path(a.name).suffix.lower(), "")
        parts.append(f"{a.name}:\n{fence}{language}\n{a.text.rstrip(chr(10))}\n{fence}")
    return "\n\n".join(parts)


class AttachmentBar(QWidget):
    """The files attached to the message being written, each with its size and a button to remove it;
    hidden while there are none."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.attachments: list[Attachment] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addStretch(1)
        self.hide()

    def add(self, attachment: Attachment) -> None:
        self.attachments.append(attachment)
        self._refill()

    def remove(self, index: int) -> None:
        del self.attachments[index]
        self._refill()

    def clear(self) -> None:
        self.attachments = []
        self._refill()

    def _refill(self) -> None:
        while self._row.count() > 1:   # the stretch stays last
            item = self._row.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        for i, a in enumerate(self.attachments):
            label = QLabel(f"{a.name} ({a.size_label})")
            label.setObjectName("statName")
            remove = QPushButton("×")
            remove.setToolTip(f"Remove {a.name}")
            remove.setFixedWidth(24)
            remove.clicked.connect(lambda _checked=False, index=i: self.remove(index))
            self._row.insertWidget(2 * i, label)
            self._row.insertWidget(2 * i + 1, remove)
        self.setVisible(bool(self.attachments))
        self.changed.emit()

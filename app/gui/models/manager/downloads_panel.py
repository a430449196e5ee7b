"""Downloads with their progress: one row each (bar, bytes, speed, ETA; Cancel, Resume, Discard),
including downloads interrupted in an earlier run, which resume where they stopped."""

from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QGroupBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout

from app.gui.models.manager.session import ManagerSession
from app.gui.widgets.plain import plain_label
from app.models.diskspace import format_bytes
from app.models.download import DownloadJob, discard_pending, download_key, pending_downloads
from app.models.hub import RemoteModel

NO_DOWNLOADS = "No downloads. Interrupted downloads resume where they stopped; closing this window pauses running ones."


class DownloadRow(QFrame):
    """One download: name, progress bar, bytes/speed/ETA, and Cancel / Resume / Discard."""

    def __init__(self, model: RemoteModel, on_cancel: Callable[[], None], on_resume: Callable[[], None],
                 on_discard: Callable[[], None]):
        super().__init__()
        self.setObjectName("panel")
        self.model = model
        self.title = QLabel(f"<b>{html.escape(model.label)}</b> "
                            f"<span style='color:#6a737d'>{html.escape(model.repo_id)}</span>")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(8)
        self.status = plain_label("waiting")
        self.status.setObjectName("status")
        self.status.setWordWrap(True)
        self.cancel_button = QPushButton("Cancel")
        self.resume_button = QPushButton("Resume")
        self.discard_button = QPushButton("Discard")
        self.discard_button.setObjectName("danger")
        self.cancel_button.clicked.connect(on_cancel)
        self.resume_button.clicked.connect(on_resume)
        self.discard_button.clicked.connect(on_discard)
        text = QVBoxLayout()
        text.setSpacing(3)
        text.addWidget(self.title)
        text.addWidget(self.bar)
        text.addWidget(self.status)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addLayout(text, 1)
        for button in (self.cancel_button, self.resume_button, self.discard_button):
            layout.addWidget(button)
        self.state = ""
        self.set_state("queued", "waiting to start")

    def set_progress(self, done: int, total: int, text: str) -> None:
        self.bar.setValue(int(1000 * done / total) if total else 1000)
        self.status.setText(text)

    def set_state(self, state: str, message: str) -> None:
        self.state = state
        running = state in ("queued", "downloading", "verifying")
        self.cancel_button.setVisible(running)
        self.resume_button.setVisible(state in ("paused", "failed"))
        self.discard_button.setVisible(state in ("paused", "failed"))
        if state == "done":
            self.bar.setValue(1000)
        if message:
            self.status.setText(message)


class DownloadsPanel(QGroupBox):
    """Every download of ``session``, live. Emits ``message(text, kind)`` when one finishes or fails."""

    message = Signal(str, str)

    def __init__(self, session: ManagerSession, empty_text: str | None = NO_DOWNLOADS, title: str = "Downloads"):
        """``empty_text`` None: no text for no downloads, the panel hides while it has none (an empty
        titled box read as a download that went missing)."""
        super().__init__(title)
        self.session = session
        self.rows: dict[str, DownloadRow] = {}
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(8, 8, 8, 8)
        self.hides_when_empty = empty_text is None
        self.empty = QLabel(empty_text or "")
        self.empty.setObjectName("footer")
        self.empty.setWordWrap(True)
        self.layout_.addWidget(self.empty)
        self._show_empty()
        session.job_updated.connect(self._on_job_update)

    def _show_empty(self) -> None:
        self.empty.setHidden(bool(self.rows) or self.hides_when_empty)
        if self.hides_when_empty:
            self.setHidden(not self.rows)

    def show_pending(self) -> None:
        """Downloads an earlier run left unfinished, paused, ready to resume."""
        for pending in pending_downloads(self.session.paths.models_dir):
            row = self._row(pending.model)
            row.set_progress(pending.done, pending.model.size,
                             f"paused at {format_bytes(pending.done)} of {format_bytes(pending.model.size)}")
            row.set_state("paused", "")

    def _row(self, model: RemoteModel) -> DownloadRow:
        key = download_key(model)
        row = self.rows.get(key)
        if row is None:
            row = DownloadRow(model, lambda: self.session.downloads.cancel(key),
                              lambda: self.session.start_download(model), lambda: self._discard(key))
            self.rows[key] = row
            self.layout_.addWidget(row)
            self._show_empty()
        return row

    def _on_job_update(self, job: DownloadJob) -> None:
        row = self._row(job.model)
        if job.progress is not None and job.active:
            row.set_progress(job.progress.done, job.progress.total, job.progress.describe())
        row.set_state(job.state, job.message if not job.active else "")
        if job.state == "done":
            self.message.emit(f"{job.message}; it is now in the installed list.", "info")
        elif job.state == "failed":
            self.message.emit(job.message, "error")

    def _discard(self, key: str) -> None:
        row = self.rows.pop(key)
        discard_pending(self.session.paths.models_dir, row.model)
        row.setParent(None)
        row.deleteLater()
        self._show_empty()

"""The "Download" tab: search Hugging Face for GGUF repositories, see a repository's files with their
size, quantization and memory fit, and download one (the downloads panel shows its progress)."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QSplitter, QVBoxLayout,
                               QWidget)

from app.gui.models.manager.common import fill, fit_item, item, selected_data, table
from app.gui.models.manager.session import ManagerSession
from app.models.diskspace import format_bytes
from app.models.hub import RemoteModel, RepoResult


class DownloadTab(QWidget):
    """Emits ``message(text, kind)``; downloads start through the session."""

    message = Signal(str, str)

    def __init__(self, session: ManagerSession):
        super().__init__()
        self.session = session
        self.remote_models: list[RemoteModel] = []
        self._build()

    def _build(self) -> None:
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search Hugging Face for GGUF models, e.g. qwen2.5 coder")
        self.search_edit.returnPressed.connect(self.start_search)
        self.search_button = QPushButton("Search")
        self.search_button.setObjectName("primary")
        self.search_button.clicked.connect(self.start_search)
        # the hub can take seconds to answer: a moving bar and what is asked, while it is asked
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setFixedWidth(120)
        self.busy_label = QLabel()
        self.busy_label.setObjectName("status")
        self._asking = 0   # requests to the hub under way
        self._show_busy()
        self.token_edit = QLineEdit()
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText(self._token_hint())
        self.token_edit.editingFinished.connect(lambda: self.session.set_token(self.token_edit.text().strip() or None))
        self.results_table = table(["Repository", "Downloads", "Likes", ""])
        self.results_table.itemSelectionChanged.connect(self._repo_selected)
        self.files_table = table(["File", "Size", "Quant", "Parts", "Memory"])
        self.card_label = QLabel("Select a repository to see its GGUF files.")
        self.card_label.setWordWrap(True)
        self.card_label.setObjectName("status")
        self.card_label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.download_button = QPushButton("Download")
        self.download_button.setObjectName("primary")
        self.download_button.clicked.connect(self.download_selected_file)
        search = QHBoxLayout()
        search.addWidget(self.search_edit, 1)
        search.addWidget(self.search_button)
        search.addWidget(self.busy_bar)
        search.addWidget(self.busy_label)
        token = QHBoxLayout()
        token.addWidget(QLabel("Token"))
        token.addWidget(self.token_edit, 1)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.card_label)
        right_layout.addWidget(self.files_table, 1)
        right_layout.addWidget(self.download_button, 0, Qt.AlignmentFlag.AlignRight)
        split = QSplitter()
        split.addWidget(self.results_table)
        split.addWidget(right)
        split.setSizes([420, 640])
        layout = QVBoxLayout(self)
        layout.addLayout(search)
        layout.addLayout(token)
        layout.addWidget(split, 1)

    @staticmethod
    def _token_hint() -> str:
        from huggingface_hub import get_token

        found = "your saved token is used" if get_token() else "none found in HF_TOKEN or `hf auth login`"
        return f"Hugging Face token for gated models (optional; {found})"

    def start_search(self) -> None:
        self.session.spawn(self._search(self.search_edit.text()))

    def _show_busy(self) -> None:
        self.busy_bar.setVisible(self._asking > 0)
        self.busy_label.setVisible(self._asking > 0)

    async def _ask(self, text: str, call, *args):
        """``call(*args)`` on a worker thread, the busy bar shown with ``text`` meanwhile (the latest
        question's words while several are under way)."""
        self._asking += 1
        self.busy_label.setText(text)
        self._show_busy()
        try:
            return await self.session.run_blocking(call, *args)
        finally:
            self._asking -= 1
            self._show_busy()

    async def _search(self, query: str) -> None:
        self.search_button.setEnabled(False)
        try:
            results: list[RepoResult] = await self._ask("Searching Hugging Face…", self.session.client.search, query)
        finally:
            self.search_button.setEnabled(True)
        fill(self.results_table, [[item(r.repo_id, r.repo_id), item(f"{r.downloads:,}"), item(f"{r.likes:,}"),
                                   item("gated" if r.gated else "")] for r in results])
        if not results:
            self.message.emit(f"No GGUF repositories match {query!r}.", "info")

    def _repo_selected(self) -> None:
        repo_id = selected_data(self.results_table)
        if repo_id is not None:
            self.session.spawn(self._list_files(repo_id))

    async def _list_files(self, repo_id: str) -> None:
        self.card_label.setText(f"Loading {html.escape(repo_id)}…")
        self.remote_models = []
        fill(self.files_table, [])
        client = self.session.client
        models = await self._ask(f"Listing the files of {repo_id}…", client.list_models, repo_id)
        self.remote_models = models
        rows = []
        for m in models:
            fit = self.session.fit(m.size + m.size // 10)   # the context is unknown before download: weights + 10 %
            rows.append([item(m.label, m.filename), item(format_bytes(m.size)), item(m.quantization),
                         item(str(len(m.parts))), fit_item(fit.verdict, f"weights + 10%: {fit.detail}")])
        fill(self.files_table, rows)
        summary = await self._ask("Reading the model card…", client.card_summary, repo_id)
        self.card_label.setText(f"<b>{html.escape(repo_id)}</b><br>{html.escape(summary or 'No model card summary.')}")

    def download_selected_file(self) -> None:
        rows = self.files_table.selectionModel().selectedRows()
        if not rows:
            self.message.emit("Select a GGUF file to download.", "warning")
            return
        self.session.start_download(self.remote_models[rows[0].row()])

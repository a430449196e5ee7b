"""The "Recommended pairs" tab: the catalog's main/draft pairs with their download size, memory and
fit on this machine, which of their files are installed, and one button to download or use a pair."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.gui.plain import plain_label
from app.models.catalog import CatalogPair
from app.models.diskspace import format_bytes
from app.models.registry import InstalledModel

from .common import fill, fit_item, item, selected_data, table
from .session import ManagerSession


class CatalogTab(QWidget):
    """Emits ``chosen(main, draft)`` for an installed pair and ``message(text, kind)``."""

    chosen = Signal(str, str)
    message = Signal(str, str)

    def __init__(self, session: ManagerSession, catalog: list[CatalogPair]):
        super().__init__()
        self.session = session
        self.catalog = catalog
        self.models: list[InstalledModel] = []
        self._build()

    def _build(self) -> None:
        self.table = table(["Pair", "For", "Download", "Memory", "Here", "Installed"])
        self.table.itemSelectionChanged.connect(self._show_details)
        self.details = plain_label("Select a pair to see which files it downloads.")
        self.details.setObjectName("status")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setMinimumHeight(self.details.fontMetrics().lineSpacing() * 3 + 6)
        self.download_pair_button = QPushButton("Download pair")
        self.download_pair_button.setObjectName("primary")
        self.download_pair_button.clicked.connect(self.download_selected_pair)
        self.use_pair_button = QPushButton("Use pair")
        self.use_pair_button.clicked.connect(self.use_selected_pair)
        buttons = QHBoxLayout()
        note = QLabel("Real GGUF builds on Hugging Face; memory is for both models with an 8K context.")
        note.setObjectName("footer")
        buttons.addWidget(note, 1)
        buttons.addWidget(self.use_pair_button)
        buttons.addWidget(self.download_pair_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        layout.addLayout(buttons)

    def set_models(self, models: list[InstalledModel]) -> None:
        self.models = models
        rows = []
        for p in self.catalog:
            fit = self.session.fit(p.expected_memory)
            main, draft = self.installed_paths(p)
            state = "both" if main and draft else "main" if main else "draft" if draft else "—"
            rows.append([item(p.title, p.id, tooltip=f"{p.main.repo_id}/{p.main.filename}\n"
                                                     f"{p.draft.repo_id}/{p.draft.filename}"),
                         item(p.use), item(format_bytes(p.download_size)), item(f"{p.expected_memory_gb:.1f} GB"),
                         fit_item(fit.verdict, fit.detail), item(state)])
        fill(self.table, rows)

    def installed_paths(self, pair: CatalogPair) -> tuple[Path | None, Path | None]:
        models_dir = self.session.paths.models_dir
        return (pair.main.find_installed(models_dir, self.models),
                pair.draft.find_installed(models_dir, self.models))

    def _show_details(self) -> None:
        pair = self._selected()
        if pair is None:
            return
        fit = self.session.fit(pair.expected_memory)
        self.details.setText(
            f"Main: {pair.main.repo_id} / {pair.main.filename} ({pair.main.params}, {pair.main.size_gb:.2f} GB)\n"
            f"Draft: {pair.draft.repo_id} / {pair.draft.filename} ({pair.draft.params}, {pair.draft.size_gb:.2f} GB)\n"
            f"Expected memory {pair.expected_memory_gb:.1f} GB at {pair.context:,} tokens: {fit.verdict}, {fit.detail}."
        )

    def _selected(self) -> CatalogPair | None:
        pair_id = selected_data(self.table)
        return next((p for p in self.catalog if p.id == pair_id), None)

    def selected_pair(self) -> CatalogPair | None:
        pair = self._selected()
        if pair is None:
            self.message.emit("Select a recommended pair.", "warning")
        return pair

    def download_selected_pair(self) -> None:
        pair = self.selected_pair()
        if pair is not None:
            self.session.spawn(self._download(pair))

    async def _download(self, pair: CatalogPair) -> None:
        if not await self.session.download_pair(pair, self.models):
            self.message.emit(f"{pair.title} is already installed.", "info")

    def use_selected_pair(self) -> None:
        pair = self.selected_pair()
        if pair is None:
            return
        main, draft = self.installed_paths(pair)
        if not (main and draft):
            self.message.emit(f"Download {pair.title} first.", "warning")
            return
        self.chosen.emit(str(main), str(draft))

"""The "Recommended pairs" tab: the catalog's main/draft pairs with their download size, memory and
fit on this machine, which of their files are installed, how each drafts and what it suits, and one
button to download or use a pair.

A pair needing something the engine cannot do (app/models/catalog.py's ENGINE_SUPPORTS) is offered as
it is: its row says what it needs, and "Use pair" loads its main model alone."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QHeaderView, QLabel, QPushButton, QVBoxLayout, QWidget

from app.gui.models.manager.common import fill, fit_item, item, selected_data, table
from app.gui.models.manager.session import ManagerSession
from app.gui.widgets.plain import plain_label
from app.models.catalog import NEED_PHRASES, CatalogPair
from app.models.diskspace import format_bytes
from app.models.download import DownloadJob
from app.models.registry import InstalledModel


async def download_pair_files(session: ManagerSession, pair: CatalogPair,
                              installed: list[InstalledModel]) -> list[DownloadJob]:
    """Start downloading whichever of the pair's files is missing: one file where the main drafts
    with its own MTP heads, else the main and its draft (``ManagerSession.download_pair``)."""
    if not pair.self_drafting:
        return await session.download_pair(pair, installed)
    jobs = []
    for wanted in pair.models:
        if wanted.find_installed(session.paths.models_dir, installed) is None:
            model = await session.run_blocking(session.client.resolve, wanted.repo_id, wanted.filename)
            jobs.append(session.start_download(model))
    return jobs


def installed_state(pair: CatalogPair, main: Path | None, draft: Path | None) -> str:
    """The "Installed" cell: both, main, draft or a dash; yes or a dash for a one-file pair."""
    if pair.self_drafting:
        return "yes" if main else "—"
    return "both" if main and draft else "main" if main else "draft" if draft else "—"


def pair_choice(pair: CatalogPair, main: Path, draft: Path | None) -> tuple[str, str, str]:
    """What "Use pair" loads: ``(main, draft, note)``; the main alone, with a note saying why, when
    the app cannot draft with this pair yet."""
    if pair.can_speculate and pair.self_drafting:   # no second file: the window drafts with MTP heads
        return str(main), "", ""
    if pair.can_speculate and draft is not None:
        return str(main), str(draft), ""
    needs = ", ".join(NEED_PHRASES[n] for n in pair.missing) or "its draft file is missing"
    return str(main), "", f"The app cannot draft with this pair yet ({needs}): its main model runs alone."


class CatalogTab(QWidget):
    """Emits ``chosen(main, draft)`` for an installed pair (``draft`` empty where the app cannot draft
    with the pair yet) and ``message(text, kind)``."""

    chosen = Signal(str, str)
    message = Signal(str, str)

    def __init__(self, session: ManagerSession, catalog: list[CatalogPair]):
        super().__init__()
        self.session = session
        self.catalog = catalog
        self.models: list[InstalledModel] = []
        self._build()

    def _build(self) -> None:
        self.table = table(["Pair", "For", "Download", "Memory", "Here", "Installed", "Drafts with", "Suits"])
        header = self.table.horizontalHeader()
        for column, width in ((6, 240), (7, 170)):   # their phrases wrap, so the pair's title keeps its room
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(column, width)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
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
        note = QLabel("Real GGUF builds on Hugging Face; memory is for all of a pair's files with an 8K context.")
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
            files = "\n".join(f"{m.repo_id}/{m.filename}" for m in p.models)
            rows.append([item(p.title, p.id, tooltip=files),
                         item(p.use), item(format_bytes(p.download_size)), item(f"{p.expected_memory_gb:.1f} GB"),
                         fit_item(fit.verdict, fit.detail), item(installed_state(p, main, draft)),
                         item(p.drafting, tooltip=p.drafting), item(p.suits_text, tooltip=p.suits_text)])
        fill(self.table, rows)

    def installed_paths(self, pair: CatalogPair) -> tuple[Path | None, Path | None]:
        """Where the main and the draft file are installed; the draft is None for a one-file pair."""
        models_dir = self.session.paths.models_dir
        draft = pair.draft_file
        return (pair.main.find_installed(models_dir, self.models),
                draft.find_installed(models_dir, self.models) if draft else None)

    def _show_details(self) -> None:
        pair = self._selected()
        if pair is None:
            return
        fit = self.session.fit(pair.expected_memory)
        main, draft = pair.main, pair.draft_file
        lines = [f"Main: {main.repo_id} / {main.filename} ({main.params}, {main.size_gb:.2f} GB)"]
        if draft is None:
            lines.append(f"Draft: none, the main {pair.drafting}.")
        else:
            label = "MTP drafter" if draft.kind == "mtp-drafter" else "Draft"
            lines.append(f"{label}: {draft.repo_id} / {draft.filename} ({draft.params}, {draft.size_gb:.2f} GB)"
                         + ("" if pair.can_speculate else f"; {pair.drafting}"))
        suits = pair.suits_text
        lines.append(f"Expected memory {pair.expected_memory_gb:.1f} GB at {pair.context:,} tokens: "
                     f"{fit.verdict}, {fit.detail}." + (f" {suits[:1].upper()}{suits[1:]}." if suits else ""))
        speed = self.session.speed(pair)
        if speed is not None:   # the first-run panel leaves out the pairs too slow here; this list has them all
            lines.append(f"Speed: {speed.describe()} ({speed.verdict}).")
        self.details.setText("\n".join(lines))

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
        if not await download_pair_files(self.session, pair, self.models):
            self.message.emit(f"{pair.title} is already installed.", "info")

    def use_selected_pair(self) -> None:
        pair = self.selected_pair()
        if pair is None:
            return
        main, draft = self.installed_paths(pair)
        if main is None or (pair.draft_file is not None and draft is None):
            self.message.emit(f"Download {pair.title} first.", "warning")
            return
        main_path, draft_path, note = pair_choice(pair, main, draft)
        self.chosen.emit(main_path, draft_path)
        if note:   # after the dialog's "Chat uses ..." line, which it would replace
            self.message.emit(note, "info")

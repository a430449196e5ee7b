"""The chat area's next step while no model is installed: the recommended pairs that fit this
machine and run at a usable speed on it (app/models/recommend.py), quick ones first, one click to download a pair (its progress shows right here), or import a GGUF file.

Each pair says how it drafts and what it suits. A pair needing something the engine cannot do
(app/models/catalog.py's ENGINE_SUPPORTS) is offered all the same, saying so; once installed its main
runs alone.

The panel starts nothing until a button is clicked: its ManagerSession (hub client, downloads, the
asyncio loop on Qt's) is made then, so a window that never needs it never builds one.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QFileDialog, QFrame, QHBoxLayout, QLabel, QPushButton, QScrollArea, QVBoxLayout,
                               QWidget)

from app.gui.models.manager.catalog_tab import download_pair_files, pair_choice
from app.gui.models.manager.downloads_panel import DownloadsPanel
from app.gui.models.manager.session import ManagerSession
from app.gui.widgets.banner import Banner
from app.gui.widgets.plain import plain_label
from app.models.catalog import CatalogError, CatalogPair, load_catalog
from app.models.diskspace import format_bytes
from app.models.download import DownloadJob
from app.models.memory import MachineMemory, machine_memory
from app.models.recommend import Recommendation, recommend
from app.paths import AppPaths


class FirstRunPanel(QWidget):
    """Signals: ``pair_ready(main, draft)`` when the files of a pair downloaded here are installed
    (``draft`` empty where the app cannot draft with the pair yet, or its main drafts for itself);
    ``model_imported(paths)`` once the files picked for an import are all installed; ``models_changed()`` after anything was installed;
    ``manage_requested()`` for the model manager ("More models…")."""

    pair_ready = Signal(str, str)
    model_imported = Signal(list)
    models_changed = Signal()
    manage_requested = Signal()

    def __init__(self, paths: AppPaths, *, machine: MachineMemory | None = None,
                 catalog: list[CatalogPair] | None = None,
                 session_factory: Callable[[], ManagerSession] | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("firstRun")
        self.paths = paths
        self.machine = machine or machine_memory()
        self.session_factory = session_factory or (lambda: ManagerSession(paths, machine=self.machine, parent=self))
        self._session: ManagerSession | None = None
        self.downloads_panel: DownloadsPanel | None = None
        self.choose_files: Callable[[], list[str]] = self._pick_files
        self.downloading: CatalogPair | None = None
        self.download_buttons: dict[str, QPushButton] = {}
        self.banner = Banner()
        self._build(self._offered(catalog))

    def _offered(self, catalog: list[CatalogPair] | None) -> list[Recommendation]:
        if catalog is None:
            try:
                catalog = load_catalog()
            except CatalogError as exc:
                self.banner.show_message(str(exc))
                catalog = []
        return recommend(catalog, self.machine)

    def _build(self, offered: list[Recommendation]) -> None:
        title = QLabel("No model installed yet")
        title.setStyleSheet("font-size: 15pt; font-weight: 600;")
        intro = plain_label("Download a recommended pair (a main model and the small draft model, or the main's own "
                            "MTP heads, that speed it up), or import a GGUF file you already have. "
                            + self.machine.describe() + ".")
        intro.setWordWrap(True)
        intro.setObjectName("status")
        self.pairs_box = QVBoxLayout()
        self.pairs_box.setSpacing(6)
        for recommendation in offered:
            self.pairs_box.addWidget(self._pair_row(recommendation))
        self.none_fit = plain_label("None of the recommended pairs fits this machine's memory and writes at a "
                                    "usable speed here: import a smaller GGUF model, or find one in the model "
                                    "manager.")
        self.none_fit.setWordWrap(True)
        self.none_fit.setVisible(not offered)
        self.import_button = QPushButton("Import a GGUF file…")
        self.import_button.clicked.connect(self.import_files)
        self.manage_button = QPushButton("More models…")
        self.manage_button.clicked.connect(self.manage_requested)
        buttons = QHBoxLayout()
        buttons.addWidget(self.import_button)
        buttons.addWidget(self.manage_button)
        buttons.addStretch(1)
        self.progress_box = QVBoxLayout()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 24, 24, 24)
        layout.setSpacing(10)
        for widget in (title, intro, self.banner):
            layout.addWidget(widget)
        layout.addLayout(self.pairs_box)
        layout.addWidget(self.none_fit)
        layout.addLayout(buttons)
        layout.addLayout(self.progress_box)
        layout.addStretch(1)

    def _pair_row(self, recommendation: Recommendation) -> QFrame:
        pair, fit, speed = recommendation.pair, recommendation.fit, recommendation.speed
        row = QFrame()
        row.setObjectName("panel")
        how = " · ".join(html.escape(phrase) for phrase in (pair.drafting, pair.suits_text) if phrase)
        fast = f" · {html.escape(speed.describe())}" if speed is not None else ""
        text = QLabel(f"<b>{html.escape(pair.title)}</b><br><span style='color:#6a737d'>for {html.escape(pair.use)} · "
                      f"{format_bytes(pair.download_size)} to download · needs about {pair.expected_memory_gb:.1f} GB: "
                      f"{html.escape(fit.verdict)}{fast}<br>{how}</span>")
        text.setToolTip(fit.detail)
        text.setWordWrap(True)   # unwrapped, its long line made the panel wider than a 1000 px window's chat
        button = QPushButton("Download")
        button.setObjectName("primary")
        button.clicked.connect(lambda: self.download_pair(pair))
        self.download_buttons[pair.id] = button
        layout = QHBoxLayout(row)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(text, 1)
        layout.addWidget(button, 0, Qt.AlignmentFlag.AlignVCenter)
        return row

    # --- the session, made on first use ------------------------------------------------------------

    @property
    def session(self) -> ManagerSession:
        if self._session is None:
            self._session = self.session_factory()
            self._session.problem.connect(self.show_message)
            self._session.models_changed.connect(self._installed)
            self._session.job_updated.connect(self._job_changed)
            self.downloads_panel = DownloadsPanel(self._session, empty_text=None, title="Downloading")
            self.downloads_panel.message.connect(self.show_message)
            self.progress_box.addWidget(self.downloads_panel)
        return self._session

    def show_message(self, text: str, kind: str = "error") -> None:
        """The banner, scrolled into view: the list of pairs may be scrolled to its end, where the
        Download clicked was, and the banner is at its top."""
        self.banner.show_message(text, kind)
        area = self.parentWidget()
        while area is not None and not isinstance(area, QScrollArea):
            area = area.parentWidget()
        if area is not None:
            self.layout().activate()   # the banner's place, now that it shows
            area.ensureWidgetVisible(self.banner)

    @property
    def busy(self) -> bool:
        """A download or an import is running."""
        return self._session is not None and self._session.busy

    def update_visibility(self, has_models: bool) -> None:
        """Shown while nothing is installed, and until what it started has finished."""
        self.setVisible(self.busy or self.downloading is not None or not has_models)

    # --- downloading a pair --------------------------------------------------------------------------

    def download_pair(self, pair: CatalogPair) -> None:
        """Download whichever of the pair's files is missing; ``pair_ready`` once all are installed."""
        self.downloading = pair
        for button in self.download_buttons.values():
            button.setEnabled(False)
        self.session.spawn(self._download(pair))

    async def _download(self, pair: CatalogPair) -> None:
        try:
            jobs = await download_pair_files(self.session, pair, self.session.registry.list())
        except BaseException:   # the hub could not be asked: the message shows, the buttons come back
            self.downloading = None
            self._enable_downloads()
            raise
        if not jobs:
            self._installed()   # its files were there already

    def _installed(self) -> None:
        self.models_changed.emit()
        pair = self.downloading
        if pair is None:
            return
        installed = self.session.registry.list()
        main = pair.main.find_installed(self.paths.models_dir, installed)
        draft_file = pair.draft_file
        draft = draft_file.find_installed(self.paths.models_dir, installed) if draft_file else None
        if main and (draft or draft_file is None):
            self.downloading = None
            self._enable_downloads()
            main_path, draft_path, note = pair_choice(pair, main, draft)
            self.show_message(f"{pair.title} is installed." + (f" {note}" if note else ""), "info")
            self.pair_ready.emit(main_path, draft_path)

    def _job_changed(self, job: DownloadJob) -> None:
        if job.state in ("paused", "failed"):   # Download again (or Resume on its row) goes on from there
            self._enable_downloads()

    def _enable_downloads(self) -> None:
        for button in self.download_buttons.values():
            button.setEnabled(True)

    # --- importing a file ----------------------------------------------------------------------------

    def import_files(self) -> None:
        """Copy the GGUF files the user picks into the models folder (without blocking the window)."""
        paths = self.choose_files()
        if paths:
            self.session.spawn(self._import(paths))

    async def _import(self, paths: list[str]) -> None:
        """Import every file, then say so once: the window chooses a pair among them all (a main model and
        its draft picked together), where one signal per file loaded each file alone."""
        imported = []
        for path in paths:
            model = await self.session.run_blocking(self.session.registry.import_file, path, "copy")
            imported.append(model)
            self.show_message(f"Imported {', '.join(m.name for m in imported)}.", "info")
        self.models_changed.emit()
        self.model_imported.emit([str(m.path) for m in imported])

    def _pick_files(self) -> list[str]:
        files, _ = QFileDialog.getOpenFileNames(self, "Import GGUF models", str(Path.home()), "GGUF models (*.gguf)")
        return files

    def shutdown(self) -> None:
        """Pause a running download (it resumes next time) and release the worker threads."""
        if self._session is not None:
            self._session.shutdown()

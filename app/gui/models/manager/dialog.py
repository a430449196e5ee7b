"""The model manager dialog: the tabs (installed, pairing, download, recommended pairs) over one
session, the downloads panel under them, a banner for messages, and GGUF files dropped anywhere on it.
"""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QDialog, QTabWidget, QVBoxLayout, QWidget

from app.gui.models.manager.catalog_tab import CatalogTab
from app.gui.models.manager.common import chosen_text
from app.gui.models.manager.download_tab import DownloadTab
from app.gui.models.manager.downloads_panel import DownloadsPanel
from app.gui.models.manager.installed_tab import InstalledTab
from app.gui.models.manager.pairing_tab import PairingTab
from app.gui.models.manager.session import HubFactory, ManagerSession
from app.gui.widgets.banner import Banner
from app.models.catalog import CatalogError, CatalogPair, load_catalog
from app.models.memory import MachineMemory
from app.paths import AppPaths

INSTALLED, PAIRING, DOWNLOAD, CATALOG = range(4)


class ModelManagerDialog(QDialog):
    """Installed models, pairing, downloads and recommended pairs. Emits ``pair_chosen(main, draft)``
    (draft "" for the main model alone) when the user picks a pair, and ``models_changed()`` whenever
    the installed list was read again (an import, a delete, a finished download).

    Without a ``session`` the dialog makes its own, and closing it pauses its downloads (they resume
    next time); with one (shared with the chat window) they go on after it closes."""

    pair_chosen = Signal(str, str)
    models_changed = Signal()

    def __init__(self, paths: AppPaths, parent: QWidget | None = None, *, hub_factory: HubFactory | None = None,
                 loop: asyncio.AbstractEventLoop | None = None, hf_cache_dir: str | None = None,
                 machine: MachineMemory | None = None, session: ManagerSession | None = None,
                 catalog: list[CatalogPair] | None = None):
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(1100, 760)
        self.setAcceptDrops(True)
        self.owns_session = session is None
        self.session = session or ManagerSession(paths, hub_factory=hub_factory, loop=loop, machine=machine,
                                                 parent=self)
        self.paths = self.session.paths
        self.banner = Banner()
        self._build(hf_cache_dir, self._catalog(catalog))
        self.session.problem.connect(self.banner.show_message)
        self.session.models_changed.connect(self.refresh_installed)
        self.refresh_installed()
        self.downloads_panel.show_pending()

    def _catalog(self, catalog: list[CatalogPair] | None) -> list[CatalogPair]:
        if catalog is not None:
            return catalog
        try:
            return load_catalog()
        except CatalogError as exc:
            self.banner.show_message(str(exc))
            return []

    def _build(self, hf_cache_dir: str | None, catalog: list[CatalogPair]) -> None:
        self.installed_tab = InstalledTab(self.session, hf_cache_dir)
        self.pairing_tab = PairingTab(self.session)
        self.download_tab = DownloadTab(self.session)
        self.catalog_tab = CatalogTab(self.session, catalog)
        self.downloads_panel = DownloadsPanel(self.session)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.installed_tab, "Installed")
        self.tabs.addTab(self.pairing_tab, "Pair a draft")
        self.tabs.addTab(self.download_tab, "Download")
        self.tabs.addTab(self.catalog_tab, "Recommended pairs")
        for view in (self.installed_tab, self.pairing_tab, self.download_tab, self.catalog_tab, self.downloads_panel):
            view.message.connect(self.banner.show_message)
        self.installed_tab.changed.connect(self._installed_changed)
        self.installed_tab.use_as_main.connect(self._use_as_main)
        self.pairing_tab.chosen.connect(self._choose)
        self.catalog_tab.chosen.connect(self._choose)
        layout = QVBoxLayout(self)
        layout.addWidget(self.banner)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.downloads_panel)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.session.loop

    @property
    def busy(self) -> bool:
        return self.session.busy

    def refresh_installed(self) -> None:
        self.installed_tab.refresh()

    def import_paths(self, paths: list[str]) -> None:
        self.installed_tab.import_paths(paths)

    def _installed_changed(self) -> None:
        models = self.installed_tab.models
        self.pairing_tab.set_models(models, self.installed_tab.context)
        self.catalog_tab.set_models(models)
        self.models_changed.emit()

    def _use_as_main(self, path: str) -> None:
        self.pairing_tab.select_main(path)
        self.tabs.setCurrentIndex(PAIRING)

    def _choose(self, main: str, draft: str) -> None:
        self.pair_chosen.emit(main, draft)
        self.banner.show_message(f"Chat uses {chosen_text(main, draft)}.", "info")

    # --- drag and drop -------------------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self._dropped_gguf(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = self._dropped_gguf(event)
        if paths:
            event.acceptProposedAction()
            self.tabs.setCurrentIndex(INSTALLED)
            self.import_paths(paths)

    @staticmethod
    def _dropped_gguf(event) -> list[str]:
        urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
        return [u.toLocalFile() for u in urls if u.isLocalFile() and u.toLocalFile().lower().endswith(".gguf")]

    # --- closing -------------------------------------------------------------------------------------

    def closeEvent(self, event) -> None:
        if self.owns_session:
            self.pause_all()
        super().closeEvent(event)

    def pause_all(self) -> None:
        """Pause the downloads (they resume next time) and drop pending hub requests."""
        self.session.pause_all()

    def shutdown(self) -> None:
        """At application exit: pause everything and release the worker threads."""
        self.session.shutdown()

"""The model manager: installed models, draft pairing, Hugging Face downloads, recommended pairs.

Opened from the chat window (``ModelManagerDialog(paths, parent)``; ``pair_chosen(main, draft_or_"")``
sets the pair there) or on its own. Downloads and hub requests are asyncio tasks on the Qt event loop
through qasync; their blocking parts run in worker threads, so the window never freezes.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import shiboken6
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView, QApplication, QCheckBox, QDialog, QFileDialog, QFrame, QGroupBox, QHBoxLayout,
    QHeaderView, QLabel, QLineEdit, QProgressBar, QPushButton, QSpinBox, QSplitter,
    QTableWidget, QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget, QComboBox,
)

from app.core.errors import QuickdraftError
from app.gui.banner import Banner
from app.gui.plain import ask, plain_label, plain_tooltip
from app.models.catalog import CatalogError, CatalogPair, load_catalog
from app.models.diskspace import format_bytes
from app.models.download import DownloadJob, DownloadManager, discard_pending, pending_downloads
from app.models.hub import HubClient, RemoteModel, RepoResult
from app.models.memory import Fit, MachineMemory, estimate_memory, judge_fit, machine_memory
from app.models.pairing import PairingResult, rank_drafts
from app.models.registry import InstalledModel, ModelRegistry, find_hf_cache_models
from app.paths import AppPaths

DEFAULT_CTX = 4096
FIT_COLORS = {"fits": "#1a7f37", "tight": "#bf8700", "too large": "#a4161a", "unknown": "#6a737d"}
_SHARED_LOOP: asyncio.AbstractEventLoop | None = None


def qt_event_loop() -> asyncio.AbstractEventLoop:
    """The asyncio loop running on Qt's event loop: the running one, or a qasync loop over the running
    QApplication (created once per process)."""
    global _SHARED_LOOP
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    if _SHARED_LOOP is None or _SHARED_LOOP.is_closed():
        import qasync

        _SHARED_LOOP = qasync.QEventLoop(QApplication.instance(), already_running=True)
        asyncio.set_event_loop(_SHARED_LOOP)
    return _SHARED_LOOP


def _item(text: str, data=None, color: str | None = None, tooltip: str | None = None) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if data is not None:
        item.setData(Qt.ItemDataRole.UserRole, data)
    if color:
        item.setForeground(QColor(color))
    if tooltip:
        item.setToolTip(plain_tooltip(tooltip))
    return item


def _table(headers: list[str], stretch: int = 0) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().hide()
    table.setAlternatingRowColors(True)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return table


def _fill(table: QTableWidget, rows: list[list[QTableWidgetItem]]) -> None:
    table.setRowCount(0)
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, item in enumerate(row):
            table.setItem(r, c, item)


def _params(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


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


class ModelManagerDialog(QDialog):
    """Installed models, pairing, downloads and recommended pairs. Emits ``pair_chosen(main, draft)``
    (draft "" for the main model alone) when the user picks a pair."""

    pair_chosen = Signal(str, str)
    models_changed = Signal()

    def __init__(self, paths: AppPaths, parent: QWidget | None = None, *,
                 hub_factory: Callable[[str | None], HubClient] | None = None,
                 loop: asyncio.AbstractEventLoop | None = None, hf_cache_dir: str | None = None,
                 machine: MachineMemory | None = None):
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(1100, 760)
        self.setAcceptDrops(True)
        self.paths = paths.ensure()
        self.registry = ModelRegistry(self.paths.models_dir)
        self.hub_factory = hub_factory or (lambda token: HubClient(token=token))
        self.hf_cache_dir = hf_cache_dir
        self.machine = machine or machine_memory()
        self.loop = loop or qt_event_loop()
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hub")
        self.client = self.hub_factory(None)
        self.downloads = DownloadManager(self.client, self.paths.models_dir, self.loop, self._on_job_update)
        self.download_rows: dict[str, DownloadRow] = {}
        self.tasks: set[asyncio.Task] = set()
        self.installed: list[InstalledModel] = []
        self.remote_models: list[RemoteModel] = []
        self.catalog: list[CatalogPair] = []
        self.pairing: PairingResult | None = None
        self.confirm: Callable[[str], bool] = self._ask
        self.choose_files: Callable[[], list[str]] = self._pick_files
        self._build()
        self.refresh_installed()
        self._load_catalog()
        self._show_pending_downloads()
        app = QApplication.instance()
        if app is not None:  # at exit, pause downloads so no worker thread holds the process open
            downloads, executor = self.downloads, self.executor
            app.aboutToQuit.connect(lambda: (downloads.shutdown(), executor.shutdown(wait=False, cancel_futures=True)))

    # --- layout -------------------------------------------------------------------------------------

    def _build(self) -> None:
        self.banner = Banner()
        self.tabs = QTabWidget()
        self.tabs.addTab(self._installed_tab(), "Installed")
        self.tabs.addTab(self._pairing_tab(), "Pair a draft")
        self.tabs.addTab(self._download_tab(), "Download")
        self.tabs.addTab(self._catalog_tab(), "Recommended pairs")
        layout = QVBoxLayout(self)
        layout.addWidget(self.banner)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self._downloads_panel())

    def _installed_tab(self) -> QWidget:
        self.installed_table = _table(["Model", "Architecture", "Params", "Quant", "Size", "Context",
                                       "Vocabulary", "Template", "Memory", "Source"])
        self.installed_table.itemSelectionChanged.connect(self._show_details)
        self.details = plain_label("Select a model to see its details. Drop GGUF files here to import them.")
        self.details.setWordWrap(True)
        self.details.setObjectName("status")
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.ctx_spin = QSpinBox()
        self.ctx_spin.setRange(256, 1_048_576)
        self.ctx_spin.setSingleStep(1024)
        self.ctx_spin.setValue(DEFAULT_CTX)
        self.ctx_spin.setSuffix(" tokens")
        self.ctx_spin.valueChanged.connect(lambda _v: self.refresh_installed())
        self.import_button = QPushButton("Import GGUF…")
        self.import_button.setObjectName("primary")
        self.import_button.clicked.connect(lambda: self.import_paths(self.choose_files()))
        self.link_check = QCheckBox("Link instead of copy")
        self.link_check.setToolTip("Keep the file where it is and put a link in the models folder")
        self.hf_cache_button = QPushButton("Find in Hugging Face cache")
        self.hf_cache_button.clicked.connect(self.add_hf_cache_models)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setObjectName("danger")
        self.delete_button.clicked.connect(self.delete_selected)
        self.use_main_button = QPushButton("Use as main model")
        self.use_main_button.clicked.connect(self._use_selected_as_main)
        tools = QHBoxLayout()
        for w in (self.import_button, self.link_check, self.hf_cache_button, self.delete_button):
            tools.addWidget(w)
        tools.addStretch(1)
        tools.addWidget(QLabel("Memory at"))
        tools.addWidget(self.ctx_spin)
        tools.addWidget(self.use_main_button)
        self.disk_label = plain_label()
        self.disk_label.setObjectName("footer")
        self.machine_label = plain_label(self.machine.describe())
        self.machine_label.setObjectName("footer")
        footer = QHBoxLayout()
        footer.addWidget(self.disk_label, 1)
        footer.addWidget(self.machine_label)
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.addLayout(tools)
        layout.addWidget(self.installed_table, 1)
        layout.addWidget(self.details)
        layout.addLayout(footer)
        return tab

    def _pairing_tab(self) -> QWidget:
        self.main_combo = QComboBox()
        self.main_combo.currentIndexChanged.connect(lambda _i: self.refresh_pairing())
        self.drafts_table = _table(["Draft", "Size", "Why", "Pair memory"], stretch=2)
        self.incompatible_table = _table(["Model", "Why it cannot draft"], stretch=1)
        self.use_pair_button = QPushButton("Use this pair")
        self.use_pair_button.setObjectName("primary")
        self.use_pair_button.clicked.connect(self.use_selected_pair)
        self.main_only_button = QPushButton("Main model only")
        self.main_only_button.clicked.connect(self.use_main_only)
        top = QHBoxLayout()
        top.addWidget(QLabel("Main model"))
        top.addWidget(self.main_combo, 1)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.main_only_button)
        buttons.addWidget(self.use_pair_button)
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.addLayout(top)
        layout.addWidget(self._title("Compatible drafts, best first (same family, then smaller)"))
        layout.addWidget(self.drafts_table, 2)
        layout.addWidget(self._title("Incompatible"))
        layout.addWidget(self.incompatible_table, 1)
        layout.addLayout(buttons)
        return tab

    def _download_tab(self) -> QWidget:
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search Hugging Face for GGUF models, e.g. qwen2.5 coder")
        self.search_edit.returnPressed.connect(self.start_search)
        self.search_button = QPushButton("Search")
        self.search_button.setObjectName("primary")
        self.search_button.clicked.connect(self.start_search)
        self.token_edit = QLineEdit()
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText(self._token_hint())
        self.token_edit.editingFinished.connect(self._token_changed)
        self.results_table = _table(["Repository", "Downloads", "Likes", ""])
        self.results_table.itemSelectionChanged.connect(self._repo_selected)
        self.files_table = _table(["File", "Size", "Quant", "Parts", "Memory"])
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
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.addLayout(search)
        layout.addLayout(token)
        layout.addWidget(split, 1)
        return tab

    def _catalog_tab(self) -> QWidget:
        self.catalog_table = _table(["Pair", "For", "Download", "Memory", "Here", "Installed"])
        self.catalog_table.itemSelectionChanged.connect(self._show_catalog_details)
        self.catalog_details = plain_label("Select a pair to see which files it downloads.")
        self.catalog_details.setObjectName("status")
        self.catalog_details.setWordWrap(True)
        self.catalog_details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.catalog_details.setMinimumHeight(self.catalog_details.fontMetrics().lineSpacing() * 3 + 6)
        self.download_pair_button = QPushButton("Download pair")
        self.download_pair_button.setObjectName("primary")
        self.download_pair_button.clicked.connect(self.download_selected_pair)
        self.use_catalog_pair_button = QPushButton("Use pair")
        self.use_catalog_pair_button.clicked.connect(self.use_selected_catalog_pair)
        buttons = QHBoxLayout()
        note = QLabel("Real GGUF builds on Hugging Face; memory is for both models with an 8K context.")
        note.setObjectName("footer")
        buttons.addWidget(note, 1)
        buttons.addWidget(self.use_catalog_pair_button)
        buttons.addWidget(self.download_pair_button)
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.addWidget(self.catalog_table, 1)
        layout.addWidget(self.catalog_details)
        layout.addLayout(buttons)
        return tab

    def _downloads_panel(self) -> QWidget:
        box = QGroupBox("Downloads")
        self.downloads_layout = QVBoxLayout(box)
        self.downloads_layout.setContentsMargins(8, 8, 8, 8)
        self.no_downloads = QLabel("No downloads. Interrupted downloads resume where they stopped; "
                                   "closing this window pauses running ones.")
        self.no_downloads.setObjectName("footer")
        self.downloads_layout.addWidget(self.no_downloads)
        return box

    @staticmethod
    def _title(text: str) -> QLabel:
        label = QLabel(text)
        label.setObjectName("sectionTitle")
        return label

    # --- installed models ---------------------------------------------------------------------------

    def refresh_installed(self) -> None:
        self.installed = self.registry.list()
        selected = self.selected_installed()
        _fill(self.installed_table, [self._installed_row(m) for m in self.installed])
        if selected is not None:
            self._select_path(self.installed_table, selected.path)
        total = self.registry.total_disk_used()
        self.disk_label.setText(f"{len(self.installed)} models · {format_bytes(total)} in {self.paths.models_dir}")
        self._refresh_main_combo()
        self._refresh_catalog()
        self.models_changed.emit()

    def _installed_row(self, m: InstalledModel) -> list[QTableWidgetItem]:
        name = _item(m.name, str(m.path), tooltip=str(m.path))
        source = _item(m.source + (f" · {m.repo_id}" if m.repo_id else ""))
        if m.info is None:
            error = _item(f"unreadable: {m.error}", color=FIT_COLORS["too large"], tooltip=m.error)
            return [name, error, *(_item("") for _ in range(6)), _item(""), source]
        i = m.info
        fit = self._fit(estimate_memory(i, self.ctx_spin.value(), m.size).total)
        return [name, _item(i.architecture), _item(_params(i.parameter_count)), _item(i.quantization),
                _item(format_bytes(m.size)), _item(f"{i.context_length:,}" if i.context_length else "?"),
                _item(f"{i.vocab_type_name}, {i.vocab_size:,}"), _item("yes" if i.chat_template else "no"),
                _item(fit.verdict, color=FIT_COLORS[fit.verdict], tooltip=fit.detail), source]

    @staticmethod
    def _select_path(table: QTableWidget, path: Path) -> None:
        for row in range(table.rowCount()):
            if table.item(row, 0).data(Qt.ItemDataRole.UserRole) == str(path):
                table.selectRow(row)
                return

    def _fit(self, needed: int) -> Fit:
        return judge_fit(needed, self.machine)

    def selected_installed(self) -> InstalledModel | None:
        rows = self.installed_table.selectionModel().selectedRows() if self.installed_table.selectionModel() else []
        if not rows:
            return None
        path = self.installed_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
        return next((m for m in self.installed if str(m.path) == path), None)

    def _show_details(self) -> None:
        m = self.selected_installed()
        if m is None:
            return
        if m.info is None:
            self.details.setText(f"{m.path}\n{m.error}")
            return
        mem = estimate_memory(m.info, self.ctx_spin.value(), m.size)
        fit = self._fit(mem.total)
        self.details.setText(
            f"{m.info.display_name} — {m.path}\nMemory: {mem.describe()} — {fit.verdict}: {fit.detail}"
        )

    def import_paths(self, paths: list[str]) -> None:
        """Import GGUF files (copy, or link when "Link instead of copy" is ticked) without blocking."""
        if paths:
            mode = "link" if self.link_check.isChecked() else "copy"
            self.spawn(self._import(paths, mode))

    async def _import(self, paths: list[str], mode: str) -> None:
        done = []
        for path in paths:
            model = await self.run_blocking(self.registry.import_file, path, mode)
            done.append(model.name)
        self.refresh_installed()
        self.banner.show_message(f"Imported {', '.join(done)}.", "info")

    def add_hf_cache_models(self) -> None:
        self.spawn(self._add_hf_cache())

    async def _add_hf_cache(self) -> None:
        cached = await self.run_blocking(find_hf_cache_models, self.hf_cache_dir)
        known = {m.path for m in self.installed}
        new = [c for c in cached if c.path.absolute() not in known]
        for c in new:
            self.registry.add_external(c.path, "hf-cache", c.repo_id)
        self.refresh_installed()
        if not cached:
            self.banner.show_message("The Hugging Face cache holds no GGUF models.", "info")
        else:
            self.banner.show_message(f"Found {len(cached)} GGUF models in the Hugging Face cache "
                                     f"({len(new)} new); they stay where they are.", "info")

    def delete_selected(self) -> None:
        m = self.selected_installed()
        if m is None:
            self.banner.show_message("Select a model to delete.", "warning")
            return
        what = "Remove it from the list (the file stays in the Hugging Face cache)" if m.external else \
            f"Delete {m.name} ({format_bytes(m.size)}) from disk"
        if not self.confirm(f"{what}?"):
            return
        try:
            message = self.registry.remove(m.path)
        except (QuickdraftError, OSError) as exc:
            self.banner.show_message(str(exc))
            return
        self.refresh_installed()
        self.banner.show_message(message, "info")

    def _ask(self, text: str) -> bool:
        return ask(self, "Delete model", text)

    def _pick_files(self) -> list[str]:
        files, _ = QFileDialog.getOpenFileNames(self, "Import GGUF models", str(Path.home()),
                                                "GGUF models (*.gguf)")
        return files

    def _use_selected_as_main(self) -> None:
        m = self.selected_installed()
        if m is None or not m.usable:
            self.banner.show_message("Select a readable model first.", "warning")
            return
        self._select_main(m.path)
        self.tabs.setCurrentIndex(1)

    # drag and drop ----------------------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self._dropped_gguf(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = self._dropped_gguf(event)
        if paths:
            event.acceptProposedAction()
            self.tabs.setCurrentIndex(0)
            self.import_paths(paths)

    @staticmethod
    def _dropped_gguf(event) -> list[str]:
        urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
        return [u.toLocalFile() for u in urls if u.isLocalFile() and u.toLocalFile().lower().endswith(".gguf")]

    # --- pairing ------------------------------------------------------------------------------------------

    def _refresh_main_combo(self) -> None:
        current = self.main_combo.currentData()
        self.main_combo.blockSignals(True)
        self.main_combo.clear()
        for m in self.installed:
            if m.usable:
                self.main_combo.addItem(f"{m.name}  ({format_bytes(m.size)})", str(m.path))
        index = self.main_combo.findData(current) if current else -1
        self.main_combo.setCurrentIndex(index if index >= 0 else self._largest_index())
        self.main_combo.blockSignals(False)
        self.refresh_pairing()

    def _largest_index(self) -> int:
        usable = [m for m in self.installed if m.usable]
        if not usable:
            return -1
        return usable.index(max(usable, key=lambda m: m.size))

    def _select_main(self, path: Path) -> None:
        index = self.main_combo.findData(str(path))
        if index >= 0:
            self.main_combo.setCurrentIndex(index)

    def refresh_pairing(self) -> None:
        main = self._main_model()
        self.pairing = rank_drafts(main, self.installed) if main else None
        self.use_pair_button.setEnabled(bool(self.pairing and self.pairing.compatible))
        self.main_only_button.setEnabled(main is not None)
        if self.pairing is None:
            _fill(self.drafts_table, [])
            _fill(self.incompatible_table, [])
            return
        ctx = self.ctx_spin.value()
        main_mem = estimate_memory(main.info, ctx, main.size)
        rows = []
        for c in self.pairing.compatible:
            fit = self._fit((main_mem + estimate_memory(c.model.info, ctx, c.model.size)).total)
            rows.append([_item(c.model.name, str(c.model.path), tooltip=str(c.model.path)),
                         _item(format_bytes(c.model.size)), _item(c.reason()),
                         _item(fit.verdict, color=FIT_COLORS[fit.verdict], tooltip=fit.detail)])
        _fill(self.drafts_table, rows)
        if rows:
            self.drafts_table.selectRow(0)
        _fill(self.incompatible_table, [[_item(c.model.name, str(c.model.path)), _item(c.reason(), tooltip=c.reason())]
                                        for c in self.pairing.incompatible])

    def _main_model(self) -> InstalledModel | None:
        path = self.main_combo.currentData()
        return next((m for m in self.installed if str(m.path) == path and m.usable), None)

    def use_selected_pair(self) -> None:
        main = self._main_model()
        rows = self.drafts_table.selectionModel().selectedRows()
        if main is None or not rows:
            self.banner.show_message("Choose a main model and a compatible draft.", "warning")
            return
        draft = self.drafts_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
        self._choose(str(main.path), draft)

    def use_main_only(self) -> None:
        main = self._main_model()
        if main is not None:
            self._choose(str(main.path), "")

    def _choose(self, main: str, draft: str) -> None:
        self.pair_chosen.emit(main, draft)
        name = Path(main).name + (f" with draft {Path(draft).name}" if draft else " without a draft")
        self.banner.show_message(f"Chat uses {name}.", "info")

    # --- Hugging Face ---------------------------------------------------------------------------------

    def _token_hint(self) -> str:
        from huggingface_hub import get_token

        found = "your saved token is used" if get_token() else "none found in HF_TOKEN or `hf auth login`"
        return f"Hugging Face token for gated models (optional; {found})"

    def _token_changed(self) -> None:
        token = self.token_edit.text().strip() or None
        if token == self.client.token:
            return
        self.client = self.hub_factory(token)
        self.downloads.client = self.client

    def start_search(self) -> None:
        self.spawn(self._search(self.search_edit.text()))

    async def _search(self, query: str) -> None:
        self.search_button.setEnabled(False)
        try:
            results: list[RepoResult] = await self.run_blocking(self.client.search, query)
        finally:
            self.search_button.setEnabled(True)
        _fill(self.results_table, [[_item(r.repo_id, r.repo_id), _item(f"{r.downloads:,}"), _item(f"{r.likes:,}"),
                                    _item("gated" if r.gated else "")] for r in results])
        if not results:
            self.banner.show_message(f"No GGUF repositories match {query!r}.", "info")

    def _repo_selected(self) -> None:
        rows = self.results_table.selectionModel().selectedRows()
        if rows:
            repo_id = self.results_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
            self.spawn(self._list_files(repo_id))

    async def _list_files(self, repo_id: str) -> None:
        self.card_label.setText(f"Loading {html.escape(repo_id)}…")
        self.remote_models = []
        _fill(self.files_table, [])
        models = await self.run_blocking(self.client.list_models, repo_id)
        self.remote_models = models
        rows = []
        for m in models:
            fit = self._fit(m.size + m.size // 10)   # the context is unknown before download: weights + 10 %
            rows.append([_item(m.label, m.filename), _item(format_bytes(m.size)), _item(m.quantization),
                         _item(str(len(m.parts))), _item(fit.verdict, color=FIT_COLORS[fit.verdict],
                                                         tooltip=f"weights + 10%: {fit.detail}")])
        _fill(self.files_table, rows)
        summary = await self.run_blocking(self.client.card_summary, repo_id)
        self.card_label.setText(f"<b>{html.escape(repo_id)}</b><br>{html.escape(summary or 'No model card summary.')}")

    def download_selected_file(self) -> None:
        rows = self.files_table.selectionModel().selectedRows()
        if not rows:
            self.banner.show_message("Select a GGUF file to download.", "warning")
            return
        self.start_download(self.remote_models[rows[0].row()])

    def start_download(self, model: RemoteModel) -> DownloadJob:
        job = self.downloads.start(model)
        return job

    # --- downloads panel ------------------------------------------------------------------------------

    def _row(self, model: RemoteModel) -> DownloadRow:
        key = f"{model.repo_id}/{model.filename}"
        row = self.download_rows.get(key)
        if row is None:
            row = DownloadRow(model, lambda: self.downloads.cancel(key), lambda: self.start_download(model),
                              lambda: self._discard(key))
            self.download_rows[key] = row
            self.downloads_layout.addWidget(row)
            self.no_downloads.hide()
        return row

    def _on_job_update(self, job: DownloadJob) -> None:
        if not shiboken6.isValid(self):   # a download ended after its window was destroyed
            return
        row = self._row(job.model)
        if job.progress is not None and job.active:
            row.set_progress(job.progress.done, job.progress.total, job.progress.describe())
        row.set_state(job.state, job.message if not job.active else "")
        if job.state == "done":
            self.refresh_installed()
            self.banner.show_message(f"{job.message}; it is now in the installed list.", "info")
        elif job.state == "failed":
            self.banner.show_message(job.message)

    def _show_pending_downloads(self) -> None:
        for pending in pending_downloads(self.paths.models_dir):
            row = self._row(pending.model)
            row.set_progress(pending.done, pending.model.size,
                             f"paused at {format_bytes(pending.done)} of {format_bytes(pending.model.size)}")
            row.set_state("paused", "")

    def _discard(self, key: str) -> None:
        row = self.download_rows.pop(key)
        discard_pending(self.paths.models_dir, row.model)
        row.setParent(None)
        row.deleteLater()
        self.no_downloads.setVisible(not self.download_rows)

    # --- recommended pairs ------------------------------------------------------------------------------

    def _load_catalog(self) -> None:
        try:
            self.catalog = load_catalog()
        except CatalogError as exc:
            self.catalog = []
            self.banner.show_message(str(exc))
        self._refresh_catalog()

    def _refresh_catalog(self) -> None:
        if not hasattr(self, "catalog_table"):
            return
        rows = []
        for p in self.catalog:
            fit = self._fit(p.expected_memory)
            main, draft = self._catalog_paths(p)
            state = "both" if main and draft else "main" if main else "draft" if draft else "—"
            rows.append([_item(p.title, p.id, tooltip=f"{p.main.repo_id}/{p.main.filename}\n"
                                                      f"{p.draft.repo_id}/{p.draft.filename}"),
                         _item(p.use), _item(format_bytes(p.download_size)),
                         _item(f"{p.expected_memory_gb:.1f} GB"),
                         _item(fit.verdict, color=FIT_COLORS[fit.verdict], tooltip=fit.detail), _item(state)])
        _fill(self.catalog_table, rows)

    def _catalog_paths(self, pair: CatalogPair) -> tuple[Path | None, Path | None]:
        models_dir = self.paths.models_dir
        return pair.main.find_installed(models_dir, self.installed), pair.draft.find_installed(models_dir, self.installed)

    def _show_catalog_details(self) -> None:
        rows = self.catalog_table.selectionModel().selectedRows()
        if not rows:
            return
        pair = self.catalog[rows[0].row()]
        fit = self._fit(pair.expected_memory)
        self.catalog_details.setText(
            f"Main: {pair.main.repo_id} / {pair.main.filename} ({pair.main.params}, {pair.main.size_gb:.2f} GB)\n"
            f"Draft: {pair.draft.repo_id} / {pair.draft.filename} ({pair.draft.params}, {pair.draft.size_gb:.2f} GB)\n"
            f"Expected memory {pair.expected_memory_gb:.1f} GB at {pair.context:,} tokens: {fit.verdict}, {fit.detail}."
        )

    def selected_catalog_pair(self) -> CatalogPair | None:
        rows = self.catalog_table.selectionModel().selectedRows()
        if not rows:
            self.banner.show_message("Select a recommended pair.", "warning")
            return None
        pair_id = self.catalog_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
        return next(p for p in self.catalog if p.id == pair_id)

    def download_selected_pair(self) -> None:
        pair = self.selected_catalog_pair()
        if pair is not None:
            self.spawn(self._download_pair(pair))

    async def _download_pair(self, pair: CatalogPair) -> None:
        main, draft = self._catalog_paths(pair)
        for wanted, have in ((pair.main, main), (pair.draft, draft)):
            if have is None:
                model = await self.run_blocking(self.client.resolve, wanted.repo_id, wanted.filename)
                self.start_download(model)
        if main and draft:
            self.banner.show_message(f"{pair.title} is already installed.", "info")

    def use_selected_catalog_pair(self) -> None:
        pair = self.selected_catalog_pair()
        if pair is None:
            return
        main, draft = self._catalog_paths(pair)
        if not (main and draft):
            self.banner.show_message(f"Download {pair.title} first.", "warning")
            return
        self._choose(str(main), str(draft))

    # --- async plumbing -------------------------------------------------------------------------------

    async def run_blocking(self, fn, *args):
        return await self.loop.run_in_executor(self.executor, fn, *args)

    def spawn(self, coro: Coroutine) -> asyncio.Task:
        """Run ``coro`` on the loop; a QuickdraftError it raises becomes the banner's message."""
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, (QuickdraftError, OSError)):
            self.banner.show_message(str(exc))
        elif exc is not None:
            self.banner.show_message(f"Unexpected error: {exc!r}")

    @property
    def busy(self) -> bool:
        return bool(self.tasks) or self.downloads.active_count > 0

    def closeEvent(self, event) -> None:
        self.pause_all()
        super().closeEvent(event)

    def pause_all(self) -> None:
        """Pause the downloads (they resume next time) and drop pending hub requests."""
        self.downloads.cancel_all()
        for task in list(self.tasks):
            task.cancel()

    def shutdown(self) -> None:
        """At application exit: pause everything and release the worker threads."""
        self.pause_all()
        self.downloads.shutdown()
        self.executor.shutdown(wait=False, cancel_futures=True)


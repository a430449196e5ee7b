"""The "Installed" tab: every model in the registry with its metadata and memory fit; import (copy or
link), the Hugging Face cache, delete."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QFileDialog, QHBoxLayout, QLabel, QPushButton, QSpinBox,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from app.core.errors import QuickdraftError
from app.gui.models.manager.common import FIT_COLORS, fill, fit_item, item, select_data, selected_data, table
from app.gui.models.manager.session import ManagerSession
from app.gui.widgets.plain import ask, plain_label
from app.models.diskspace import format_bytes, format_params
from app.models.memory import estimate_memory
from app.models.registry import InstalledModel, find_hf_cache_models

DEFAULT_CTX = 4096


class InstalledTab(QWidget):
    """Emits ``changed()`` after the list is read again, ``use_as_main(path)`` and ``message(text, kind)``."""

    changed = Signal()
    use_as_main = Signal(str)
    message = Signal(str, str)

    def __init__(self, session: ManagerSession, hf_cache_dir: str | None = None):
        super().__init__()
        self.session = session
        self.hf_cache_dir = hf_cache_dir
        self.models: list[InstalledModel] = []
        self.confirm: Callable[[str], bool] = lambda text: ask(self, "Delete model", text)
        self.choose_files: Callable[[], list[str]] = self._pick_files
        self._build()

    def _build(self) -> None:
        self.table = table(["Model", "Architecture", "Params", "Quant", "Size", "Context", "Vocabulary",
                            "Template", "Memory", "Source"])
        self.table.itemSelectionChanged.connect(self._show_details)
        self.details = plain_label("Select a model to see its details. Drop GGUF files here to import them.")
        self.details.setWordWrap(True)
        self.details.setObjectName("status")
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.ctx_spin = QSpinBox()
        self.ctx_spin.setRange(256, 1_048_576)
        self.ctx_spin.setSingleStep(1024)
        self.ctx_spin.setValue(DEFAULT_CTX)
        self.ctx_spin.setSuffix(" tokens")
        self.ctx_spin.valueChanged.connect(lambda _v: self.refresh())
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
        self.machine_label = plain_label(self.session.machine.describe())
        self.machine_label.setObjectName("footer")
        footer = QHBoxLayout()
        footer.addWidget(self.disk_label, 1)
        footer.addWidget(self.machine_label)
        layout = QVBoxLayout(self)
        layout.addLayout(tools)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        layout.addLayout(footer)

    @property
    def context(self) -> int:
        """The context size memory estimates are made for."""
        return self.ctx_spin.value()

    def refresh(self) -> None:
        registry = self.session.registry
        self.models = registry.list()
        selected = self.selected()
        fill(self.table, [self._row(m) for m in self.models])
        if selected is not None:
            select_data(self.table, str(selected.path))
        self.disk_label.setText(f"{len(self.models)} models · {format_bytes(registry.total_disk_used())} "
                                f"in {registry.models_dir}")
        self.changed.emit()

    def _row(self, m: InstalledModel) -> list[QTableWidgetItem]:
        name = item(m.name, str(m.path), tooltip=str(m.path))
        source = item(m.source + (f" · {m.repo_id}" if m.repo_id else ""))
        if m.info is None:
            error = item(f"unreadable: {m.error}", color=FIT_COLORS["too large"], tooltip=m.error)
            return [name, error, *(item("") for _ in range(6)), item(""), source]
        i = m.info
        fit = self.session.fit(estimate_memory(i, self.context, m.size).total)
        return [name, item(i.architecture), item(format_params(i.parameter_count)), item(i.quantization),
                item(format_bytes(m.size)), item(f"{i.context_length:,}" if i.context_length else "?"),
                item(f"{i.vocab_type_name}, {i.vocab_size:,}"), item("yes" if i.chat_template else "no"),
                fit_item(fit.verdict, fit.detail), source]

    def selected(self) -> InstalledModel | None:
        path = selected_data(self.table)
        return next((m for m in self.models if str(m.path) == path), None)

    def _show_details(self) -> None:
        m = self.selected()
        if m is None:
            return
        if m.info is None:
            self.details.setText(f"{m.path}\n{m.error}")
            return
        mem = estimate_memory(m.info, self.context, m.size)
        fit = self.session.fit(mem.total)
        self.details.setText(f"{m.info.display_name} — {m.path}\nMemory: {mem.describe()} — {fit.verdict}: {fit.detail}")

    # --- changing the list -----------------------------------------------------------------------

    def import_paths(self, paths: list[str]) -> None:
        """Import GGUF files (copy, or link when "Link instead of copy" is ticked) without blocking."""
        if paths:
            mode = "link" if self.link_check.isChecked() else "copy"
            self.session.spawn(self._import(paths, mode))

    async def _import(self, paths: list[str], mode: str) -> None:
        done = []
        for path in paths:
            model = await self.session.run_blocking(self.session.registry.import_file, path, mode)
            done.append(model.name)
        self.refresh()
        self.message.emit(f"Imported {', '.join(done)}.", "info")

    def add_hf_cache_models(self) -> None:
        self.session.spawn(self._add_hf_cache())

    async def _add_hf_cache(self) -> None:
        cached = await self.session.run_blocking(find_hf_cache_models, self.hf_cache_dir)
        known = {m.path for m in self.models}
        new = [c for c in cached if c.path.absolute() not in known]
        for c in new:
            self.session.registry.add_external(c.path, "hf-cache", c.repo_id)
        self.refresh()
        if not cached:
            self.message.emit("The Hugging Face cache holds no GGUF models.", "info")
        else:
            self.message.emit(f"Found {len(cached)} GGUF models in the Hugging Face cache "
                              f"({len(new)} new); they stay where they are.", "info")

    def delete_selected(self) -> None:
        m = self.selected()
        if m is None:
            self.message.emit("Select a model to delete.", "warning")
            return
        what = "Remove it from the list (the file stays in the Hugging Face cache)" if m.external else \
            f"Delete {m.name} ({format_bytes(m.size)}) from disk"
        if not self.confirm(f"{what}?"):
            return
        try:
            text = self.session.registry.remove(m.path)
        except (QuickdraftError, OSError) as exc:
            self.message.emit(str(exc), "error")
            return
        self.refresh()
        self.message.emit(text, "info")

    def _pick_files(self) -> list[str]:
        files, _ = QFileDialog.getOpenFileNames(self, "Import GGUF models", str(Path.home()), "GGUF models (*.gguf)")
        return files

    def _use_selected_as_main(self) -> None:
        m = self.selected()
        if m is None or not m.usable:
            self.message.emit("Select a readable model first.", "warning")
            return
        self.use_as_main.emit(str(m.path))

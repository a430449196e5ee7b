"""The "Pair a draft" tab: pick a main model; its compatible drafts are ranked (same family first,
then smaller) with the pair's memory fit, the others listed with the reason they cannot draft."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.gui.models.manager.common import fill, fit_item, item, section_title, selected_data, table
from app.gui.models.manager.session import ManagerSession
from app.models.diskspace import format_bytes
from app.models.memory import estimate_memory
from app.models.pairing import PairingResult, rank_drafts
from app.models.registry import InstalledModel


class PairingTab(QWidget):
    """Emits ``chosen(main, draft)`` (draft "" for the main model alone) and ``message(text, kind)``."""

    chosen = Signal(str, str)
    message = Signal(str, str)

    def __init__(self, session: ManagerSession):
        super().__init__()
        self.session = session
        self.models: list[InstalledModel] = []
        self.context = 4096
        self.pairing: PairingResult | None = None
        self._build()

    def _build(self) -> None:
        self.main_combo = QComboBox()
        self.main_combo.currentIndexChanged.connect(lambda _i: self.refresh())
        self.drafts_table = table(["Draft", "Size", "Why", "Pair memory"], stretch=2)
        self.incompatible_table = table(["Model", "Why it cannot draft"], stretch=1)
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
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(section_title("Compatible drafts, best first (same family, then smaller)"))
        layout.addWidget(self.drafts_table, 2)
        layout.addWidget(section_title("Incompatible"))
        layout.addWidget(self.incompatible_table, 1)
        layout.addLayout(buttons)

    def set_models(self, models: list[InstalledModel], context: int) -> None:
        """The installed models, and the context size the pair's memory is estimated for."""
        self.models, self.context = models, context
        current = self.main_combo.currentData()
        self.main_combo.blockSignals(True)
        self.main_combo.clear()
        for m in self._usable():
            self.main_combo.addItem(f"{m.name}  ({format_bytes(m.size)})", str(m.path))
        index = self.main_combo.findData(current) if current else -1
        self.main_combo.setCurrentIndex(index if index >= 0 else self._largest_index())
        self.main_combo.blockSignals(False)
        self.refresh()

    def _usable(self) -> list[InstalledModel]:
        return [m for m in self.models if m.usable]

    def _largest_index(self) -> int:
        usable = self._usable()
        return usable.index(max(usable, key=lambda m: m.size)) if usable else -1

    def select_main(self, path: str) -> None:
        index = self.main_combo.findData(path)
        if index >= 0:
            self.main_combo.setCurrentIndex(index)

    def refresh(self) -> None:
        main = self._main_model()
        self.pairing = rank_drafts(main, self.models) if main else None
        self.use_pair_button.setEnabled(bool(self.pairing and self.pairing.compatible))
        self.main_only_button.setEnabled(main is not None)
        if self.pairing is None:
            fill(self.drafts_table, [])
            fill(self.incompatible_table, [])
            return
        main_mem = estimate_memory(main.info, self.context, main.size)
        rows = []
        for c in self.pairing.compatible:
            fit = self.session.fit((main_mem + estimate_memory(c.model.info, self.context, c.model.size)).total)
            rows.append([item(c.model.name, str(c.model.path), tooltip=str(c.model.path)),
                         item(format_bytes(c.model.size)), item(c.reason()), fit_item(fit.verdict, fit.detail)])
        fill(self.drafts_table, rows)
        if rows:
            self.drafts_table.selectRow(0)
        fill(self.incompatible_table, [[item(c.model.name, str(c.model.path)), item(c.reason(), tooltip=c.reason())]
                                       for c in self.pairing.incompatible])

    def _main_model(self) -> InstalledModel | None:
        path = self.main_combo.currentData()
        return next((m for m in self._usable() if str(m.path) == path), None)

    def use_selected_pair(self) -> None:
        main = self._main_model()
        draft = selected_data(self.drafts_table)
        if main is None or draft is None:
            self.message.emit("Choose a main model and a compatible draft.", "warning")
            return
        self.chosen.emit(str(main.path), draft)

    def use_main_only(self) -> None:
        main = self._main_model()
        if main is not None:
            self.chosen.emit(str(main.path), "")

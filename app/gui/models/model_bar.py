"""Choose the main model and its draft. Both pickers list every installed model (the models registry:
the model manager's imports and downloads, ``quickdraft models import|download``), recently opened
ones first, plus recently opened files kept elsewhere. The draft picker lists the drafts that can
draft for the chosen main model; the others (incompatible or unreadable, disabled, with the reason)
only on asking ("Show N incompatible drafts…"). Picking a main model picks its best draft
(app/models/pairing.py best_draft), which the window says with an undo. A damaged file never stops
the bar."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (QComboBox, QFileDialog, QFrame, QHBoxLayout, QLabel, QProgressBar,
                               QPushButton, QSizePolicy)

from app.core.params import DEFAULT_DRAFTER, DrafterKind
from app.gui.models.model_files import (DraftOption, draft_options, drafter_file_kind, gguf_files_beside, is_remote,
                                        mtp_layers, not_a_main_reason, remote_label, unique, unreadable_reason)
from app.gui.widgets.plain import ElidedLabel, plain_tooltip
from app.models.pairing import best_draft, installed_file
from app.models.registry import ModelRegistry

SHOW_HIDE = "\x00show-hide"   # the draft picker's last item: show or hide the incompatible drafts
# why a drafter that needs something of the pair is greyed out
UNOFFERED = {
    DrafterKind.MTP: "The main model has no MTP layers (it cannot draft for itself) and the draft is not an MTP drafter",
    DrafterKind.EAGLE3: "Choose an EAGLE-3 drafter made for the main model as the draft",
    DrafterKind.DFLASH: "Choose a DFlash or DSpark drafter made for the main model as the draft",
}
# At the window's minimum width (1000 px) the pickers give way, down to PICKER_MIN_PX, so that the
# status keeps STATUS_MIN_PX: the start of "Loaded …" (its whole text in its tool tip)
PICKER_MIN_PX = 150
STATUS_MIN_PX = 180


class ModelBar(QFrame):
    load_requested = Signal(str, str)       # main path, draft path ("" = none)
    remote_requested = Signal(str)          # a recent server's URL was chosen and Load pressed
    drafter_changed = Signal(str)
    problem = Signal(str)                   # something the user picked cannot be used
    draft_chosen = Signal(str, str, str)    # main, the draft the bar chose for it, the draft before (for an undo)

    def __init__(self, models_dir: Path, parent=None):
        super().__init__(parent)
        self.setObjectName("modelBar")
        self.models_dir = models_dir
        self.registry = ModelRegistry(models_dir)
        self.installed: list[str] = []      # the registry's models (paths), read again by refresh()
        self.recent_main: list[str] = []
        self.recent_drafts: list[str] = []
        self.remotes: list[str] = []        # recent OpenAI-compatible servers, listed after the files
        self.options: list[DraftOption] = []
        self._loaded: tuple[str, str] | None = None   # the loaded pair's main and draft ("" none), as picked
        self._loaded_text = ""
        self.show_incompatible = False      # the draft picker lists incompatible drafts too (disabled)
        self._shown_draft = ""              # the draft chosen in the picker (not the show/hide item)
        self._build()
        self.installed = self._read_installed()
        self._offer_heads()   # no main model yet: nothing to draft with MTP

    def _build(self) -> None:
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(8)
        self.main_combo = self._combo("Main model: the one whose answers you get")
        self.main_combo.currentIndexChanged.connect(self._main_changed)
        self.main_combo.activated.connect(self._main_picked)
        self.main_open = _browse_button("Open a GGUF file as the main model")
        self.main_open.clicked.connect(self.browse_main)
        self.draft_combo = self._combo("Draft model: proposes tokens the main model verifies")
        self.draft_open = _browse_button("Open a GGUF file as the draft model")
        self.draft_open.clicked.connect(self.browse_draft)
        self.drafter = QComboBox()
        self.drafter.setToolTip("Who drafts: the draft model, prompt lookup (copies text that repeats, free), "
                                "lookup first then the draft model, or nobody (the main model alone)")
        for kind in DrafterKind:
            self.drafter.addItem(kind.label, kind.value)
        self.drafter.currentIndexChanged.connect(lambda _: self.drafter_changed.emit(self.current_drafter()))
        self._wanted = DEFAULT_DRAFTER   # the drafter last asked for, by the user or the settings
        self.drafter.activated.connect(lambda _: setattr(self, "_wanted", self.current_drafter()))
        self.draft_combo.currentIndexChanged.connect(self._draft_changed)
        self.load_button = QPushButton("Load")
        self.load_button.setObjectName("primary")
        self.load_button.clicked.connect(self.request_load)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setFixedWidth(90)
        self.progress.hide()
        self.status = ElidedLabel("No model loaded")
        self.status.setObjectName("status")
        self.status.setMinimumWidth(STATUS_MIN_PX)
        for widget in (QLabel("Main"), self.main_combo, self.main_open, QLabel("Draft"), self.draft_combo,
                       self.draft_open, QLabel("Drafting"), self.drafter, self.load_button, self.progress):
            layout.addWidget(widget)
        layout.addWidget(self.status, 1)

    @staticmethod
    def _combo(tip: str) -> QComboBox:
        combo = QComboBox()
        combo.setModel(QStandardItemModel(combo))
        combo.setToolTip(tip)
        combo.setMinimumWidth(PICKER_MIN_PX)
        combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        combo.setMinimumContentsLength(22)
        combo.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        return combo

    # --- choices -------------------------------------------------------------------------------

    def set_recent(self, mains: list[str], drafts: list[str]) -> None:
        """The recently opened files, most recent first: listed before the other installed models."""
        self.recent_main = [p for p in mains if Path(p).is_file()]
        self.recent_drafts = [p for p in drafts if Path(p).is_file()]
        self._fill_main(self.current_main() or self._first_main())

    def set_remotes(self, urls: list[str]) -> None:
        """Recent servers, listed in the main picker after the model files."""
        self.remotes = list(urls)
        self._fill_main(self.current_main() or self._first_main())

    def refresh(self) -> None:
        """Read the installed models again (after an import, a download or a delete); the chosen
        main model and draft stay chosen."""
        self.installed = self._read_installed()
        draft = self.current_draft()
        self._fill_main(self.current_main() or self._first_main())
        index = self.draft_combo.findData(draft) if draft else -1
        if index >= 0 and self.draft_combo.model().item(index).isEnabled():
            self.draft_combo.setCurrentIndex(index)

    def _read_installed(self) -> list[str]:
        try:
            return [str(m.path) for m in self.registry.list()]
        except OSError:   # an unreadable models folder lists nothing; the recent files still do
            return []

    def _first_main(self) -> str:
        return next((p for p in self._main_paths("") if not not_a_main_reason(p)), "")

    @property
    def has_models(self) -> bool:
        """Whether any main model can be picked: False on a first run, before anything is installed."""
        model = self.main_combo.model()
        return any(model.item(i).isEnabled() for i in range(model.rowCount()))

    def current_main(self) -> str:
        return self.main_combo.currentData() or ""

    def current_drafter(self) -> DrafterKind:
        return DrafterKind(self.drafter.currentData())

    def set_drafter(self, kind: DrafterKind | str) -> None:
        """Choose who drafts (the settings' choice, at start): MTP waits for a main model that has MTP
        layers, lookup + draft standing in meanwhile."""
        self._wanted = DrafterKind(kind)
        self._select_drafter(self._wanted)

    def _select_drafter(self, kind: DrafterKind) -> None:
        index = max(0, self.drafter.findData(kind.value))
        if not self.drafter.model().item(index).isEnabled():   # MTP for a main without MTP layers
            index = self.drafter.findData(DrafterKind.LOOKUP_MODEL.value)
        self.drafter.setCurrentIndex(index)

    def current_draft(self) -> str:
        data = self.draft_combo.currentData() or ""
        return "" if data == SHOW_HIDE else data

    def set_main(self, path: str) -> None:
        self._fill_main(path)

    def set_draft(self, path: str) -> bool:
        """Select ``path`` as the draft; False (and a problem signal) when it cannot draft."""
        if not path:
            self.draft_combo.setCurrentIndex(0)
            return True
        if path not in [o.path for o in self.options]:
            self.recent_drafts = [path] + [p for p in self.recent_drafts if p != path]
            self._fill_drafts()
        option = next((o for o in self.options if o.path == path), None)
        if option is None:
            self.problem.emit(self._no_draft_reason(path))
            return False
        if not option.enabled:
            self.problem.emit(f"{Path(path).name} cannot draft for {Path(self.current_main()).name}: {option.reason}.")
            return False
        self.draft_combo.setCurrentIndex(self.draft_combo.findData(path))
        return True

    def _no_draft_reason(self, path: str) -> str:
        main = self.current_main()
        if not main:
            return "Choose the main model first: drafts are checked against it."
        itself = f"{Path(path).name} is the main model itself; choose another file as the draft."
        return unreadable_reason(main) or itself

    def option_for(self, path: str) -> DraftOption | None:
        return next((o for o in self.options if o.path == path), None)

    def is_draft_item_enabled(self, path: str) -> bool:
        index = self.draft_combo.findData(path)
        return index >= 0 and self.draft_combo.model().item(index).isEnabled()

    def request_load(self) -> None:
        if not self.current_main():
            self.problem.emit("Choose a main model first (or open a file with … next to Main).")
            return
        if is_remote(self.current_main()):
            self.remote_requested.emit(self.current_main())
            return
        self.load_requested.emit(self.current_main(), self.current_draft())

    def _main_paths(self, selected: str) -> list[str]:
        chosen = [selected] if selected and not is_remote(selected) else []
        return unique(chosen + self.recent_main + self.installed)

    def _fill_main(self, selected: str) -> None:
        paths = self._main_paths(selected)
        remotes = list(dict.fromkeys(([selected] if is_remote(selected) else []) + self.remotes))
        self.main_combo.blockSignals(True)
        self.main_combo.clear()
        for path in paths:
            self._add_main_item(path)
        for url in remotes:
            self.main_combo.addItem(remote_label(url), url)
            self.main_combo.setItemData(self.main_combo.count() - 1, plain_tooltip(
                f"{url}\nAn OpenAI-compatible server: it answers with its own model and drafting"),
                Qt.ItemDataRole.ToolTipRole)
        if not paths and not remotes:
            self.main_combo.setPlaceholderText("Open a GGUF model…")
        self.main_combo.setCurrentIndex(max(self.main_combo.findData(selected), 0) if paths or remotes else -1)
        self.main_combo.blockSignals(False)
        self._main_changed(self.main_combo.currentIndex())

    def _add_main_item(self, path: str) -> None:
        """The main model; a file that cannot be one (unreadable, an MTP drafter) stays listed with the
        reason (it may be the one the settings name) but cannot be picked again."""
        reason = not_a_main_reason(path)
        label = "(unreadable)" if unreadable_reason(path) else "(draft only)"
        self.main_combo.addItem(f"{Path(path).name} {label}" if reason else Path(path).name, path)
        index = self.main_combo.count() - 1
        self.main_combo.setItemData(index, plain_tooltip(f"{path}\n{reason}" if reason else path),
                                    Qt.ItemDataRole.ToolTipRole)
        self.main_combo.model().item(index).setEnabled(not reason)

    def _main_changed(self, _index: int) -> None:
        self._fill_drafts()
        self._offer_heads()
        self._show_pending()

    def _main_picked(self, _index: int) -> None:
        """The user chose a main model: its best draft is chosen with it, and the window says so with
        an undo (back to the draft the picker had kept)."""
        main, kept, best = self.current_main(), self.current_draft(), self.best_draft()
        if main and best and best != kept and self.set_draft(best):
            self.draft_chosen.emit(main, best, kept)

    def best_draft(self) -> str:
        """The draft the app picks for the chosen main model among the compatible ones listed (the
        model manager's ranking: an MTP drafter made for it, the catalog's draft for it, the same family,
        the smallest); "" when none can draft for it."""
        main = self.current_main()
        if not main or is_remote(main):
            return ""
        best = best_draft(installed_file(main), [installed_file(o.path) for o in self.options if o.enabled])
        return str(best.path) if best else ""

    def main_has_mtp(self) -> bool:
        """Whether the chosen main model carries MTP layers (it can draft for itself)."""
        main = self.current_main()
        return bool(main) and not is_remote(main) and mtp_layers(main) > 0

    def draft_drafts_as(self) -> DrafterKind | None:
        """How the chosen draft drafts when it is a drafter file (an MTP drafter: MTP; EAGLE-3; DFlash)."""
        draft = self.current_draft()
        return drafter_file_kind(draft) if draft else None

    def _offer_heads(self) -> None:
        """The drafters that need something of the pair only where it has it: "MTP heads" for a main model
        that carries MTP layers or an MTP drafter as the draft, EAGLE-3 and DFlash for a drafter file of
        that kind as the draft; otherwise greyed out, saying why (and, if one was chosen, lookup + draft
        instead). Choosing a drafter file as the draft chooses its kind."""
        file_kind = self.draft_drafts_as()
        offered = {DrafterKind.MTP: self.main_has_mtp() or file_kind is DrafterKind.MTP,
                   DrafterKind.EAGLE3: file_kind is DrafterKind.EAGLE3, DrafterKind.DFLASH: file_kind is DrafterKind.DFLASH}
        for kind, available in offered.items():
            item = self.drafter.model().item(self.drafter.findData(kind.value))
            item.setEnabled(available)
            item.setToolTip("" if available else UNOFFERED[kind])
        # the choice follows the pair; what was asked for comes back with a pair that has it
        wanted = file_kind or (self._wanted if offered.get(self._wanted) else None)
        if not offered.get(self.current_drafter(), True):
            wanted = wanted or DrafterKind.LOOKUP_MODEL
        if wanted is not None and wanted is not self.current_drafter():
            self._select_drafter(wanted)

    def _candidates(self) -> list[str]:
        """Recent drafts, then the installed models, then the GGUF files next to the main model."""
        main = self.current_main()
        beside = gguf_files_beside(main) if main else []
        return unique(self.recent_drafts + self.installed + beside)

    def _fill_drafts(self) -> None:
        """The drafts that can draft for the chosen main model; the others (disabled, with the reason)
        only while "Show incompatible" is on."""
        previous = self._shown_draft
        main = self.current_main()
        self.options = draft_options(main, self._candidates()) if main and not is_remote(main) else []
        model: QStandardItemModel = self.draft_combo.model()
        self.draft_combo.blockSignals(True)
        model.clear()
        model.appendRow(QStandardItem("No draft model"))
        for option in self.options:
            if option.enabled or self.show_incompatible:
                model.appendRow(self._draft_item(option))
        hidden = sum(not o.enabled for o in self.options)
        if hidden:
            toggle = QStandardItem("Hide incompatible drafts" if self.show_incompatible
                                   else f"Show {hidden} incompatible draft{'s' if hidden > 1 else ''}…")
            toggle.setData(SHOW_HIDE, Qt.ItemDataRole.UserRole)
            toggle.setToolTip("Drafts that cannot draft for this main model, with the reason")
            model.appendRow(toggle)
        index = self.draft_combo.findData(previous) if previous else -1
        if index < 0 or not model.item(index).isEnabled():
            index = self._first_enabled_recent()
        self.draft_combo.setCurrentIndex(max(index, 0))
        self._shown_draft = self.current_draft()
        self.draft_combo.blockSignals(False)

    @staticmethod
    def _draft_item(option: DraftOption) -> QStandardItem:
        item = QStandardItem(option.label)
        item.setData(option.path, Qt.ItemDataRole.UserRole)
        item.setToolTip(plain_tooltip(f"{option.path}\n{option.reason}" if option.reason else option.path))
        item.setEnabled(option.enabled)
        return item

    def _draft_changed(self, _index: int) -> None:
        if self.draft_combo.currentData() == SHOW_HIDE:   # the show/hide item: toggle, keep the draft
            self.show_incompatible = not self.show_incompatible
            self._fill_drafts()
            return
        self._shown_draft = self.current_draft()
        self._offer_heads()   # a drafter file drafts as its kind
        self._show_pending()

    def _first_enabled_recent(self) -> int:
        for path in self.recent_drafts:
            index = self.draft_combo.findData(path)
            if index >= 0 and self.draft_combo.model().item(index).isEnabled():
                return index
        return 0

    def browse_main(self) -> None:
        """Ask for a GGUF file to use as the main model."""
        path, _ = QFileDialog.getOpenFileName(self, "Open main model", str(self.models_dir), "GGUF models (*.gguf)")
        if path:
            self.set_main(path)

    def browse_draft(self) -> None:
        """Ask for a GGUF file to use as the draft (checked against the main model)."""
        if not self.current_main():
            self.problem.emit("Choose the main model first: drafts are checked against it.")
            return
        path, _ = QFileDialog.getOpenFileName(self, "Open draft model", str(Path(self.current_main()).parent),
                                              "GGUF models (*.gguf)")
        if path:
            self.set_draft(path)


    # --- state ---------------------------------------------------------------------------------

    def set_loading(self, name: str) -> None:
        self.status.set_full_text(f"Loading {name}…")
        self.progress.show()
        self._enable(False)

    def set_loaded(self, main_name: str, draft_name: str | None, main: str = "", draft: str = "") -> None:
        """A pair is loaded: ``main`` and ``draft`` its files (or the server's URL), "" for no draft."""
        self.progress.hide()
        self._loaded = (main, draft)
        self._loaded_text = f"Loaded {main_name}" + (f" + draft {draft_name}" if draft_name else " (no draft)")
        self._show_pending()
        self._enable(True)

    def set_unloaded(self, message: str = "No model loaded") -> None:
        self.progress.hide()
        self._loaded = None
        self.status.set_full_text(message)
        self._enable(True)

    def _show_pending(self) -> None:
        """A pair chosen in the pickers is used only once Load is pressed: while the choice differs from
        what is loaded, the status says so (picking changed nothing, and nothing said why)."""
        if self._loaded is None or not self.progress.isHidden():
            return
        main, draft = self.current_main(), self.current_draft()
        if main != self._loaded[0]:
            pending = f"Press Load to use {Path(main).name if not is_remote(main) else remote_label(main)} · "
        elif draft != self._loaded[1]:
            pending = (f"Press Load to draft with {Path(draft).name} · " if draft else
                       "Press Load to answer without a draft model · ")
        else:
            pending = ""
        self.status.set_full_text(pending + self._loaded_text)

    def set_busy(self, busy: bool) -> None:
        """While generating, models cannot change."""
        self._enable(not busy)

    def _enable(self, on: bool) -> None:
        for widget in (self.main_combo, self.main_open, self.draft_combo, self.draft_open, self.load_button):
            widget.setEnabled(on)


def _browse_button(tip: str) -> QPushButton:
    """"…" beside a picker, as file pickers have it: the words go in its tool tip, the width to the pickers."""
    button = QPushButton("…")
    button.setToolTip(tip)
    return button

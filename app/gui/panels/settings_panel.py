"""Generation and loading settings as a form; every change is reported as a new Settings value."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Signal
from pathlib import Path

from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QPushButton,
                               QSpinBox, QWidget)

from app.core.llama.devices import CPU_ONLY, preferred_gpu
from app.core.params import AUTO, PolicyName
from app.gui.panels.chat_template_editor import ChatTemplateEditor
from app.storage.settings import GPU_LAYER_FIELDS, LIMITS, Settings

AUTO_LAYERS = -2  # the GPU-layer editors' minimum, shown as "auto"
# field name, label, step, tooltip; the kind and range come from Settings and LIMITS
FIELDS = [
    ("temperature", "Temperature", 0.05, "0 = greedy: always the most likely token"),
    ("top_k", "Top-k", 1, "0 = off"),
    ("top_p", "Top-p", 0.01, "1 = off"),
    ("min_p", "Min-p", 0.01, "0 = off"),
    ("seed", "Seed", 1, "-1 = a new random seed each time"),
    ("max_tokens", "Max tokens", 64, "The longest answer"),
    ("draft_max", "Draft max", 1, "Most tokens a model drafts per round; a copy of the text may run to 4x, at most 64"),
    ("draft_min", "Draft min", 1, "Shorter drafts are dropped"),
    ("p_min", "Draft p-min", 0.05, "Stop drafting when the draft is less sure than this"),
    ("n_ctx", "Context size", 512, "Tokens of context; 0 = the model's own (reload to apply)"),
    ("main_gpu_layers", "GPU layers (main)", 1,
     "auto = what fits in free GPU memory after the draft; -1 = all (reload to apply)"),
    ("draft_gpu_layers", "GPU layers (draft)", 1,
     "auto = all if they fit (a draft on the CPU rarely pays); -1 = all (reload to apply)"),
    ("threads", "Threads", 1, "0 = automatic (reload to apply)"),
    ("conversation_cache_mb", "Conversation cache (MB)", 256,
     "Disk kept for the caches of conversations left, so that switching back reads only the new message; "
     "the least recently used go first. 0 = none (reload to apply)"),
    ("suffix_index_mb", "Suffix index (MB)", 16,
     "The most each main model's index of past answers and prompts may take on disk; the oldest go first "
     "(reload to apply)"),
]
SECTIONS = {"temperature": "SAMPLING", "draft_max": "SPECULATION", "n_ctx": "LOADING"}
# shown instead of the minimum value, which means something special
SPECIAL = {"top_k": "off", "seed": "random", "n_ctx": "model's own", "main_gpu_layers": "auto",
           "draft_gpu_layers": "auto", "threads": "auto", "conversation_cache_mb": "off"}


class SettingsPanel(QWidget):
    changed = Signal(object)      # Settings: the panel's own copy, with the edit
    edited = Signal(str, object)  # the one setting edited and its value: what the window saves

    def __init__(self, settings: Settings, parent=None, gpus: tuple | None = None, suffix_folder: Path | None = None):
        super().__init__(parent)
        self._settings = settings
        self._suffix_folder = suffix_folder   # the suffix index's folder, for its size and Clear (None: not shown)
        self._gpus = gpus
        self.editors: dict[str, QSpinBox | QDoubleSpinBox] = {}
        form = QFormLayout(self)
        form.setContentsMargins(12, 12, 12, 12)
        form.setVerticalSpacing(6)
        for name, label, step, tip in FIELDS:
            if name in SECTIONS:
                form.addRow(self._section(SECTIONS[name]))
            low, high = LIMITS[name]
            kind = type(getattr(Settings(), name))
            if name in GPU_LAYER_FIELDS:
                low, kind = AUTO_LAYERS, int
            editor = self._editor(kind, low, high, step, tip, SPECIAL.get(name, ""))
            editor.setValue(_editor_value(getattr(settings, name)))
            editor.valueChanged.connect(lambda value, n=name: self._edited(n, value))
            self.editors[name] = editor
            form.addRow(label, editor)
            if name == "draft_min":
                form.addRow("Draft length", self._policy_editor(settings.draft_policy))
            if name == "draft_gpu_layers":
                form.addRow("Device", self._device_editor(settings.device))
            if name == "n_ctx":
                form.addRow("Chat template", self._template_editor())
            if name == "suffix_index_mb":
                form.addRow("", self._suffix_editor(settings.suffix_index))
        note = QLabel("Context, the chat template, GPU layers, device, threads, the conversation cache and the "
                      "suffix index apply when models are (re)loaded.")
        note.setObjectName("statName")
        note.setWordWrap(True)
        form.addRow(note)

    @staticmethod
    def _section(title: str) -> QLabel:
        label = QLabel(title)
        label.setObjectName("sectionTitle")
        label.setContentsMargins(0, 8, 0, 0)
        return label

    @staticmethod
    def _editor(kind: type, low: float, high: float, step: float, tip: str,
                special: str) -> QSpinBox | QDoubleSpinBox:
        editor = QDoubleSpinBox() if kind is float else QSpinBox()
        if kind is float:
            editor.setDecimals(2)
        editor.setRange(low, high)
        editor.setSingleStep(step)
        editor.setToolTip(tip)
        editor.setSpecialValueText(special)
        return editor

    def _policy_editor(self, current: str) -> QComboBox:
        self.policy = QComboBox()
        for policy in PolicyName:
            self.policy.addItem(policy.label, policy.value)
        self.policy.setCurrentIndex(max(self.policy.findData(current), 0))
        self.policy.setToolTip("How many tokens to draft each round")
        self.policy.currentIndexChanged.connect(lambda _i: self._edited("draft_policy", self.policy.currentData()))
        return self.policy

    def _suffix_editor(self, on: bool) -> QWidget:
        """Use the suffix index (draft from past answers and prompts) or not, and Clear, with its size."""
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        self.suffix_on = QCheckBox("Draft from past answers")
        self.suffix_on.setChecked(on)
        self.suffix_on.setToolTip("The suffix index: what followed the text's end in earlier answers, tool calls "
                                  "and prompts of this model, drafted after prompt lookup (reload to apply)")
        self.suffix_on.toggled.connect(lambda checked: self._edited("suffix_index", checked))
        self.suffix_clear = QPushButton()
        self.suffix_clear.setToolTip("Delete every model's suffix index; a loaded model forgets it when reloaded")
        self.suffix_clear.clicked.connect(self.clear_suffix_index)
        layout.addWidget(self.suffix_on)
        layout.addWidget(self.suffix_clear)
        row.setVisible(self._suffix_folder is not None)
        self.show_suffix_size()
        return row

    def show_suffix_size(self) -> None:
        """The Clear button says how much the index takes on disk now."""
        from app.core.speculation.suffix_store import list_indexes

        size = sum(s.bytes for s in list_indexes(self._suffix_folder)) if self._suffix_folder else 0
        self.suffix_clear.setText(f"Clear ({size / 2**20:.1f} MB)")
        self.suffix_clear.setEnabled(size > 0)

    def clear_suffix_index(self) -> None:
        from app.core.speculation.suffix_store import clear_indexes

        if self._suffix_folder is not None:
            clear_indexes(self._suffix_folder)
        self.show_suffix_size()

    def showEvent(self, event) -> None:
        if self._suffix_folder is not None:
            self.show_suffix_size()   # answers fed it since it was last shown
        super().showEvent(event)

    def _device_editor(self, current: str) -> QComboBox:
        """auto, the CPU alone, or one of the GPUs llama.cpp found (a saved one that is gone is kept,
        marked, so loading says what is wrong instead of the setting changing silently)."""
        self.device = QComboBox()
        gpus = self._found_gpus()
        best = preferred_gpu(gpus)
        self.device.addItem(f"auto ({best.name}: {best.description})" if best else "auto (no GPU found: CPU)", AUTO)
        self.device.addItem("CPU only", CPU_ONLY)
        for gpu in gpus:
            self.device.addItem(f"{gpu.name}: {gpu.description}", gpu.name)
        if self.device.findData(current) < 0:
            self.device.addItem(f"{current} (not found)", current)
        self.device.setCurrentIndex(self.device.findData(current))
        self.device.setToolTip("The GPU both models run on; auto picks a discrete GPU first, then the most free memory")
        self.device.currentIndexChanged.connect(lambda _i: self._edited("device", self.device.currentData()))
        return self.device

    def _template_editor(self) -> ChatTemplateEditor:
        self.chat_template = ChatTemplateEditor(_template_names())
        self.chat_template.chosen.connect(lambda main, choice: self._edited(
            "chat_templates", self._settings.with_chat_template(main, choice).chat_templates))
        self.show_model(self._settings.main_model)
        return self.chat_template

    def show_model(self, main: str) -> None:
        """The chat template editor speaks of main model ``main`` (the one loaded or chosen last)."""
        self.chat_template.show_model(main, self._settings.chat_template_for(main) if main else "")

    def _found_gpus(self) -> tuple:
        if self._gpus is None:
            try:
                from app.core.llama.devices import system_info

                self._gpus = system_info().gpus
            except Exception:  # llama.cpp's library did not load: the status bar says why
                self._gpus = ()
        return self._gpus

    def settings(self) -> Settings:
        return self._settings

    def set_value(self, name: str, value) -> None:
        if name == "suffix_index":
            self.suffix_on.setChecked(value)
            return
        self.editors[name].setValue(_editor_value(value))

    def _edited(self, name: str, value) -> None:
        if name in GPU_LAYER_FIELDS:
            value = AUTO if value == AUTO_LAYERS else int(value)
        else:
            value = type(getattr(self._settings, name))(value)
        self._settings = replace(self._settings, **{name: value})
        self.changed.emit(self._settings)
        self.edited.emit(name, value)


def _template_names() -> tuple[str, ...]:
    try:
        from app.core.llama import named_templates

        return named_templates.names()
    except Exception:  # llama.cpp's library did not load: the status bar says why
        return ()


def _editor_value(value):
    return AUTO_LAYERS if value == AUTO else value

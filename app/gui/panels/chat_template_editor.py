"""The chat template the selected main model is loaded with: its own, one of llama.cpp's built-in
formats (llama-server's --chat-template NAME), or a Jinja file (--chat-template-file). Kept per main
model file, since a format fits one model and not another; applied when the model is (re)loaded."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFileDialog

OWN = ""
FROM_FILE = "\0file"   # the item that asks for a file (no choice is ever this)
TIP = ("For the selected main model: its own chat template, one of llama.cpp's built-in formats, or a Jinja "
       "file of your own (reload to apply). Use another when the model's own is missing or wrong.")


class ChatTemplateEditor(QComboBox):
    chosen = Signal(str, str)   # (main model path, choice: a built-in name, a file's path, "" for its own)

    def __init__(self, names: tuple[str, ...], parent=None):
        super().__init__(parent)
        self._names = names
        self._model = ""
        self._choice = OWN
        self.setToolTip(TIP)
        self.activated.connect(self._picked)
        self.show_model("", OWN)

    def show_model(self, main: str, choice: str) -> None:
        """The choice of main model ``main`` ("": none selected, nothing to choose)."""
        self._model, self._choice = main, choice
        self.blockSignals(True)
        self.clear()
        self.addItem("the model's own", OWN)
        for name in self._names:
            self.addItem(f"llama.cpp built-in: {name}", name)
        self.addItem("from a file…", FROM_FILE)
        if choice and self.findData(choice) < 0:   # a file, or a name this llama.cpp no longer has
            self.addItem(_label(choice), choice)
        self.setCurrentIndex(self.findData(choice))
        self.setEnabled(bool(main))
        self.blockSignals(False)

    def _picked(self, index: int) -> None:
        choice = self.itemData(index)
        if choice == FROM_FILE:
            choice = self._ask_file()
            if not choice:   # cancelled: the choice stays as it was
                self.setCurrentIndex(self.findData(self._choice))
                return
        if choice != self._choice:
            self.show_model(self._model, choice)
            self.chosen.emit(self._model, choice)

    def _ask_file(self) -> str:
        path, _ = QFileDialog.getOpenFileName(self, "A Jinja chat template", "",
                                              "Jinja templates (*.jinja *.j2 *.jinja2 *.txt);;All files (*)")
        return str(Path(path).resolve()) if path else ""


def _label(choice: str) -> str:
    path = Path(choice)
    if not path.is_absolute():
        return f"{choice} (not in this llama.cpp)"
    return f"file: {path.name}" + ("" if path.is_file() else " (not found)")

"""The status bar's account of the hardware: llama.cpp's backend, the GPUs it found with their free
memory, and where the loaded pair's layers went."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy

from app.core.devices import SystemInfo, system_info


class HardwareStatus(QLabel):
    """One elided line of plain text; the whole account is in the tooltip."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("hardwareStatus")
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._system: SystemInfo | None = None
        self._placement: tuple[str, ...] = ()
        self._full = ""

    def show_system(self, system: SystemInfo | None = None) -> None:
        try:
            self._system = system or system_info()
        except Exception as exc:  # llama.cpp's library failed to load: say so, the window still works
            self._full = f"llama.cpp is not available: {exc}"
            self._refresh()
            return
        self._update()

    def show_placement(self, placement: tuple[str, ...]) -> None:
        """``placement``: one line per loaded model ("main: 29/29 layers on the GPU (CUDA0 4.2 GiB)")."""
        self._placement = tuple(placement)
        self._update()

    @property
    def full_text(self) -> str:
        return self._full

    def _update(self) -> None:
        parts = [self._system.summary()] if self._system else []
        parts += self._placement
        self._full = "  ·  ".join(parts)
        tooltip = []
        if self._system is not None:
            tooltip.append(f"llama.cpp backends: {', '.join(self._system.backends)}")
            tooltip += [d.describe() for d in self._system.devices]
            if self._system.problem():
                tooltip.append(self._system.problem())
        tooltip += self._placement
        self.setToolTip("\n".join(tooltip))
        self._refresh()

    def _refresh(self) -> None:
        metrics = QFontMetrics(self.font())
        self.setText(metrics.elidedText(self._full, Qt.TextElideMode.ElideRight, max(self.width() - 4, 40)))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._refresh()

"""The status bar's account of the hardware: llama.cpp's backend, the GPUs it found with their free
memory, and where the loaded pair's layers went."""

from __future__ import annotations

from app.core.llama.devices import SystemInfo, system_info
from app.gui.widgets.plain import ElidedLabel, plain_tooltip


class HardwareStatus(ElidedLabel):
    """One elided line of plain text; the whole account is in the tooltip."""

    def __init__(self, parent=None):
        super().__init__("", parent)
        self.setObjectName("hardwareStatus")
        self._system: SystemInfo | None = None
        self._placement: tuple[str, ...] = ()

    def show_system(self, system: SystemInfo | None = None) -> None:
        try:
            self._system = system or system_info()
        except Exception as exc:  # llama.cpp's library failed to load: say so, the window still works
            self.set_full_text(f"llama.cpp is not available: {exc}")
            return
        self._update()

    def show_placement(self, placement: tuple[str, ...]) -> None:
        """``placement``: one line per loaded model ("main: 29/29 layers on the GPU (CUDA0 4.2 GiB)")."""
        self._placement = tuple(placement)
        self._update()

    def _update(self) -> None:
        parts = [self._system.summary()] if self._system else []
        self.set_full_text("  ·  ".join(parts + list(self._placement)))
        details = []
        if self._system is not None:
            details += self._system.details()
        self.setToolTip(plain_tooltip("\n".join(details + list(self._placement))))

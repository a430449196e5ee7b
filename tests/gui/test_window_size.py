"""The window fits a 1280x800 screen in every state, long model names included."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.gui.main_window import MainWindow
from app.paths import app_paths
from app.storage.settings import SettingsStore
from tests.gui.conftest import wait_loaded

LONG_MAIN = "a very long name for the main model Qwen2.5 Coder 1.5B Instruct GGUF quantized Q4_K_M edition"
LONG_DRAFT = "a very long name for the draft model Qwen2.5 Coder 0.5B Instruct GGUF quantized Q8_0 edition"


def _fits_1280x800(window) -> bool:
    hints = (window.sizeHint(), window.minimumSizeHint(), window.minimumSize())
    layout_fits_minimum = window.minimumSize().expandedTo(window.minimumSizeHint()) == window.minimumSize()
    return layout_fits_minimum and all(h.width() <= 1280 and h.height() <= 800 for h in hints)


def test_window_opens_within_the_screen_and_at_most_1440x900(qtbot, tmp_path):
    paths = app_paths(tmp_path / "data")
    window = MainWindow(paths, SettingsStore(paths.settings_file))  # as the app opens it: no resize
    qtbot.addWidget(window)
    available = QApplication.primaryScreen().availableGeometry()  # 800x800 on the offscreen platform
    assert window.height() <= min(900, available.height()) and window.width() <= 1440
    assert window.width() <= max(available.width(), window.minimumWidth())
    assert _fits_1280x800(window)


def test_long_model_names_do_not_grow_the_window(make_window, qtbot, tmp_path):
    main = write_tiny_model(tmp_path / "main.gguf", TinySpec(seed=0, name=LONG_MAIN))
    draft = write_tiny_model(tmp_path / "draft.gguf", TinySpec(seed=0, name=LONG_DRAFT))
    window = make_window(main_model=str(main), draft_model=str(draft), drafter="model")
    wait_loaded(qtbot, window)
    status = window.model_bar.status
    assert LONG_MAIN in status.toolTip() and LONG_DRAFT in status.toolTip()
    assert _fits_1280x800(window)

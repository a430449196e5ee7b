"""A first run in the window: with nothing installed the chat area offers the next step (the first-run
panel); once a model is installed or loaded, the chat comes back."""

from __future__ import annotations

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.models.registry import ModelRegistry
from tests.gui.conftest import LOAD_TIMEOUT_MS


def test_nothing_installed_shows_the_next_step_instead_of_an_empty_chat(make_window, tmp_path):
    window = make_window()
    assert window.first_run.isVisible() and window.chat_view.isHidden()

    ModelRegistry(window.paths.models_dir).import_file(write_tiny_model(tmp_path / "m.gguf", TinySpec(seed=0)))
    window.first_run.models_changed.emit()   # what an import or download through the panel sends
    assert window.first_run.isHidden() and window.chat_view.isVisible()
    assert window.model_bar.has_models


def test_a_model_loaded_from_a_file_elsewhere_brings_the_chat_back(qtbot, make_window, gui_models):
    window = make_window()
    assert window.first_run.isVisible()
    window.set_model_pair(str(gui_models.main), None)
    qtbot.waitUntil(lambda: window.controller.loaded is not None, timeout=LOAD_TIMEOUT_MS)
    assert window.first_run.isHidden() and window.chat_view.isVisible()

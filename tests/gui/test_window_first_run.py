"""A first run in the window: with nothing installed the chat area offers the next step (the first-run
panel); once a model is installed or loaded, the chat comes back."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.gui.models.manager.session import ManagerSession
from app.models.registry import ModelRegistry
from tests.gui.conftest import LOAD_TIMEOUT_MS, MACHINE, wait_loaded


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


def test_importing_a_main_model_and_its_drafts_in_the_window_loads_the_pair(qtbot, qloop, make_window, tiny_models):
    """Issue 41, fault 1: importing the bench trio (a main model, a smaller draft of its vocabulary and one of
    another) loaded each file alone and ended with the main model and no draft, also after a restart. The
    import chooses the pair a first start chooses (app/models/pairing.py first_pair), says so, and it is
    the pair the next start opens."""
    window = make_window()
    panel = window.first_run
    panel.session_factory = lambda: ManagerSession(window.paths, loop=qloop, machine=MACHINE)
    panel.choose_files = lambda: [str(tiny_models.other_vocab), str(tiny_models.main), str(tiny_models.bigger)]
    loads = []
    window.controller.model_loading.connect(loads.append)
    qtbot.mouseClick(panel.import_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.busy and window.controller.loaded is not None and not window.controller.loading,
                    timeout=LOAD_TIMEOUT_MS)
    installed = {m.name: str(m.path) for m in ModelRegistry(window.paths.models_dir).list()}
    loaded = window.controller.loaded
    assert (loaded.main_path, loaded.draft_path) == (installed["bigger.gguf"], installed["main.gguf"])
    assert loads == ["bigger.gguf"], "one load, of the chosen pair, not one per imported file"
    assert "Chose bigger.gguf as the main model" in window.banner.text()
    window.close()

    again = make_window()
    wait_loaded(qtbot, again)
    assert again.controller.loaded.draft_path == installed["main.gguf"]

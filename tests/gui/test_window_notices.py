"""Issue 41, fault 6: what the window says goes when it stops being true, and the window says what it will
do: a load's warning goes with the next load, the server's refusal goes when the address is changed back,
the first start's "Chose …" goes once the user chats, a draft picked but not loaded says Load is needed,
and sending with nothing installed says what to do first."""

from __future__ import annotations

import pytest

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.models.registry import ModelRegistry
from app.paths import app_paths
from tests.gui.conftest import LOAD_TIMEOUT_MS, send, wait_idle, wait_loaded


def load(qtbot, window, main, draft) -> None:
    assert window.set_model_pair(str(main), str(draft) if draft else None)
    qtbot.waitUntil(lambda: not window.controller.loading, timeout=LOAD_TIMEOUT_MS)


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """A main model, a smaller draft of its vocabulary (it loads with no warning) and one of another."""
    d = tmp_path_factory.mktemp("trio")
    return (write_tiny_model(d / "big.gguf", TinySpec(seed=0, n_layer=4)), write_tiny_model(d / "small.gguf", TinySpec(seed=0)),
            write_tiny_model(d / "other-vocab.gguf", TinySpec(seed=2, other_vocab=True)))


def test_a_loads_warning_goes_with_the_next_load(make_window, trio, qtbot):
    main, draft, other_vocab = trio
    window = make_window(main_model=str(main), draft_model=str(other_vocab), drafter="model")
    wait_loaded(qtbot, window)
    assert "different vocabulary" in window.banner.text()
    load(qtbot, window, main, draft)
    assert window.controller.loaded.draft_path == str(draft) and not window.controller.loaded.warnings
    assert window.banner.text() == ""


def test_a_warning_of_another_origin_stays_through_a_load(make_window, trio, qtbot):
    main, draft, other_vocab = trio
    window = make_window(main_model=str(main), draft_model=str(other_vocab), drafter="model")
    wait_loaded(qtbot, window)
    window.banner.show_message("Settings could not be saved: disk full", "warning")
    load(qtbot, window, main, draft)
    assert window.banner.text() == "Settings could not be saved: disk full"


def test_the_servers_refusal_goes_when_the_address_is_changed_back(make_window):
    panel = make_window().server_panel
    panel.host.setText("0.0.0.0")
    panel.host.editingFinished.emit()
    panel.switch.setChecked(True)   # no API key: refused, with the reason
    assert "0.0.0.0" in panel.status.text() and not panel.switch.isChecked()
    panel.host.setText("127.0.0.1")
    panel.host.editingFinished.emit()
    assert "0.0.0.0" not in panel.status.text() + panel.note.text()
    assert panel.status.text() == "Off"


def test_the_first_starts_choice_is_said_until_the_user_chats(make_window, qtbot, tmp_path):
    paths = app_paths(tmp_path / "first").ensure()
    registry = ModelRegistry(paths.models_dir)
    src = tmp_path / "src"
    registry.import_file(write_tiny_model(src / "tiny-big.gguf", TinySpec(seed=0, n_layer=4, name="Tiny 3M")))
    registry.import_file(write_tiny_model(src / "tiny-small.gguf", TinySpec(seed=0, name="Tiny 1M")))
    window = make_window(tmp_path / "first", max_tokens=4)
    wait_loaded(qtbot, window)
    assert window.banner.text().startswith("Chose tiny-big.gguf")
    assert send(window, "hello")
    assert window.banner.text() == ""
    wait_idle(qtbot, window)


def test_a_draft_picked_and_not_loaded_says_load_is_needed(make_window, gui_models, qtbot):
    window = make_window(main_model=str(gui_models.main), draft_model=str(gui_models.same), drafter="model")
    wait_loaded(qtbot, window)
    bar = window.model_bar
    assert bar.status.full_text.startswith("Loaded tiny + draft tiny")
    assert bar.set_draft(str(gui_models.other))
    assert bar.status.full_text.startswith("Press Load to draft with other.gguf")
    assert bar.set_draft(str(gui_models.same))
    assert bar.status.full_text == "Loaded tiny + draft tiny"
    bar.set_draft("")
    assert bar.status.full_text.startswith("Press Load to answer without a draft model")
    bar.set_main(str(gui_models.other))
    assert bar.status.full_text.startswith("Press Load to use other.gguf")
    bar.request_load()
    qtbot.waitUntil(lambda: not window.controller.loading, timeout=LOAD_TIMEOUT_MS)
    assert bar.status.full_text.startswith("Loaded tiny")


def test_sending_with_nothing_installed_says_to_download_or_import_a_model(make_window):
    window = make_window()
    assert window.first_run.isVisible()
    assert not send(window, "hello")
    assert window.error_text() == ("No model is installed yet: download a recommended pair or import a GGUF file "
                                   "you have (above).")


def test_a_progress_line_moves_on_while_shown_and_stays_away_once_dismissed(qtbot):
    from app.gui.widgets.banner import Banner

    banner = Banner()
    qtbot.addWidget(banner)
    banner.show_message("Comparing, run 1 of 2", "info")
    banner.replace("Comparing, run 1 of 2", "Comparing, run 2 of 2")
    assert banner.text() == "Comparing, run 2 of 2" and banner.kind == "info"
    banner.replace("Comparing, run 1 of 2", "stale")   # an old line replaces nothing
    assert banner.text() == "Comparing, run 2 of 2"
    banner.clear()   # dismissed
    banner.replace("Comparing, run 2 of 2", "Comparing, run 2 of 2: 10 tokens")
    assert banner.isHidden() and banner.text() == ""

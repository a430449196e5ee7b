"""The chat template a main model is loaded with, chosen in Settings per main model file: its own, a
llama.cpp built-in format or a Jinja file; kept in the settings file and applied when it loads."""

from __future__ import annotations

import pytest

from app.core.errors import InvalidParameterError
from app.gui.panels import chat_template_editor
from app.gui.panels.settings_panel import SettingsPanel
from app.storage.settings import Settings, SettingsStore
from tests.gui.conftest import TEST_SETTINGS, send, wait_idle, wait_loaded

TEMPLATE = "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{% endfor %}<<assistant>>"


def pick(editor, data) -> None:
    """Choose the item holding ``data`` as a user does (activated is the user's signal)."""
    index = editor.findData(data)
    editor.setCurrentIndex(index)
    editor.activated.emit(index)


def test_a_built_in_format_or_a_file_is_chosen_for_the_selected_model_alone(qtbot, tmp_path, monkeypatch):
    jinja = tmp_path / "mine.jinja"
    jinja.write_text(TEMPLATE)
    panel = SettingsPanel(Settings(main_model="/models/a.gguf"))
    qtbot.addWidget(panel)
    editor = panel.chat_template
    assert editor.isEnabled() and editor.currentData() == "" and editor.findData("chatml") > 0
    with qtbot.waitSignal(panel.edited) as edited:
        pick(editor, "chatml")
    assert edited.args == ["chat_templates", (("/models/a.gguf", "chatml"),)]
    monkeypatch.setattr(chat_template_editor.QFileDialog, "getOpenFileName", lambda *a, **k: ("", ""))
    pick(editor, chat_template_editor.FROM_FILE)   # cancelled: nothing changes
    assert editor.currentData() == "chatml" and panel.settings().chat_template_for("/models/a.gguf") == "chatml"
    monkeypatch.setattr(chat_template_editor.QFileDialog, "getOpenFileName", lambda *a, **k: (str(jinja), ""))
    with qtbot.waitSignal(panel.edited):
        pick(editor, chat_template_editor.FROM_FILE)
    assert panel.settings().chat_template_for("/models/a.gguf") == str(jinja)
    assert editor.currentText() == "file: mine.jinja"
    panel.show_model("/models/b.gguf")   # another model keeps its own
    assert editor.currentData() == ""
    panel.show_model("/models/a.gguf")
    assert editor.currentData() == str(jinja)
    with qtbot.waitSignal(panel.edited) as edited:
        pick(editor, "")
    assert edited.args == ["chat_templates", ()]


def test_nothing_to_choose_without_a_model_and_a_lost_file_is_marked(qtbot, tmp_path):
    panel = SettingsPanel(Settings())
    qtbot.addWidget(panel)
    assert not panel.chat_template.isEnabled()
    gone = str(tmp_path / "gone.jinja")
    panel = SettingsPanel(Settings(main_model="/m.gguf", chat_templates=(("/m.gguf", gone),)))
    qtbot.addWidget(panel)
    assert panel.chat_template.currentText() == "file: gone.jinja (not found)"


def test_the_choice_is_kept_and_becomes_the_models_parameters(tmp_path):
    jinja = tmp_path / "t.jinja"
    jinja.write_text(TEMPLATE)
    store = SettingsStore(tmp_path / "settings.json")
    store.save(Settings(chat_templates=(("/a.gguf", "llama3"), ("/b.gguf", str(jinja)))))
    settings = store.load()
    assert store.problem is None and settings.chat_template_for("/a.gguf") == "llama3"
    a, b, c = (settings.main_params(p) for p in ("/a.gguf", "/b.gguf", "/c.gguf"))
    assert (a.chat_template_name, a.chat_template) == ("llama3", None)
    assert (b.chat_template_name, b.chat_template) == (None, TEMPLATE)
    assert (c.chat_template_name, c.chat_template) == (None, None)
    jinja.unlink()
    with pytest.raises(InvalidParameterError, match="t.jinja cannot be read"):
        settings.main_params("/b.gguf")
    (tmp_path / "settings.json").write_text('{"chat_templates": [["/a.gguf"]]}')
    assert store.load().chat_templates == () and "chat_templates" in store.problem


def test_the_window_loads_the_model_with_the_chosen_file_and_says_when_it_is_gone(make_window, gui_models, qtbot, tmp_path):
    jinja = tmp_path / "t.jinja"
    jinja.write_text(TEMPLATE)
    main = str(gui_models.main)
    window = make_window(settings=TEST_SETTINGS, main_model=main, chat_templates=((main, str(jinja)),))
    wait_loaded(qtbot, window)
    assert window.controller.loaded.chat_template == TEMPLATE
    assert window.settings_panel.chat_template.currentText() == "file: t.jinja"
    assert send(window, "the cat")
    wait_idle(qtbot, window)
    jinja.unlink()
    notices = []
    window.controller.notice.connect(lambda text, kind: notices.append((text, kind)))
    assert not window.controller.load_pair(main)
    assert notices and notices[-1][1] == "error" and "t.jinja cannot be read" in notices[-1][0]
    assert window.controller.loaded.chat_template == TEMPLATE   # nothing unloaded

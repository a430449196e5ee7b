"""The window opens whatever state its files are in, and says what it did about them."""

from __future__ import annotations

import html
import os
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.core.gguf.tiny import CHATML_TEMPLATE, TinySpec, write_tiny_model
from app.gui.main_window import MainWindow
from app.paths import app_paths
from app.storage.settings import GPU_LAYER_FIELDS, LIMITS
from tests.gui.conftest import wait_idle, wait_loaded
from tests.storage.damage import DATABASE_DAMAGE, SETTINGS_DAMAGE, damage_database


def still_usable(window) -> bool:
    conversation_id = window.controller.new_conversation()
    window.controller.rename_conversation(conversation_id, "Works")
    return "Works" in window.conversation_list.titles()


@pytest.mark.parametrize("kind", DATABASE_DAMAGE)
def test_a_damaged_conversations_database(make_window, tmp_path, kind):
    paths = app_paths(tmp_path / "data")
    damage_database(paths.conversations_db, kind)
    window = make_window()
    assert window.isVisible() and window.banner.kind == "warning"
    assert "conversations database was damaged" in window.banner.text() and "kept as" in window.banner.text()
    assert list(paths.data_dir.glob("conversations.sqlite3.corrupt-*"))
    assert still_usable(window)


@pytest.mark.parametrize("kind", SETTINGS_DAMAGE)
def test_a_damaged_or_invalid_settings_file(make_window, tmp_path, kind):
    content, said = SETTINGS_DAMAGE[kind]
    paths = app_paths(tmp_path / "data").ensure()
    paths.settings_file.write_bytes(content)
    window = make_window()
    assert window.isVisible() and window.banner.kind == "warning" and said in window.banner.text()
    for name, editor in window.settings_panel.editors.items():
        low, high = LIMITS[name]
        assert low <= editor.value() <= high or (name in GPU_LAYER_FIELDS and editor.text() == "auto")
    assert still_usable(window)


def test_a_data_dir_that_cannot_be_created(qtbot, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("the data dir would have to be inside this file")
    window = MainWindow(app_paths(blocker / "root"))
    qtbot.addWidget(window)
    window.show()
    text = window.banner.text()
    assert window.isVisible() and "could not be created" in text and "kept in memory only" in text
    assert still_usable(window)
    window.model_manager_action.trigger()
    assert "model manager cannot open" in window.error_text()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a user that permission bits stop")
def test_a_read_only_data_dir(make_window, tmp_path):
    first = make_window()
    first.new_conversation()
    first.close()
    paths = app_paths(tmp_path / "data")
    for folder in (paths.data_dir, paths.config_dir):
        folder.chmod(0o555)
    try:
        window = make_window()
        assert "cannot be saved" in window.banner.text() and len(window.conversation_list.titles()) == 1
        assert still_usable(window)
        window.close()
    finally:
        for folder in (paths.data_dir, paths.config_dir):
            folder.chmod(0o755)


def crafted_damage() -> dict:
    from app.core.gguf import reader as g
    from tests.core.gguf.craft import Crafted, Tensor

    return {"version-99": Crafted(version=99), "unknown-tensor-type": Crafted(tensors=[Tensor(type=200)]),
            "alignment-0": Crafted().set("general.alignment", g.UINT32, 0),
            "nested-arrays": Crafted().set("x.nested", g.ARRAY, (g.ARRAY, [])),
            "tokens-of-the-wrong-type": Crafted().set("tokenizer.ggml.tokens", g.UINT32, 7),
            "huge-tensor": Crafted(tensors=[Tensor(dims=(2**62, 2**62))])}


def damaged_models(folder: Path, main: Path) -> dict[str, Path]:
    """Files in the models folder that are not usable models, by what is wrong with them."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    made["random-bytes"] = folder / "random.gguf"
    made["random-bytes"].write_bytes(os.urandom(5000))
    made["truncated"] = folder / "truncated.gguf"
    made["truncated"].write_bytes(main.read_bytes()[:2000])
    made["magic-only"] = folder / "magic.gguf"
    made["magic-only"].write_bytes(b"GGUF")
    made["directory"] = folder / "folder.gguf"
    made["directory"].mkdir()
    made["symlink-loop"] = folder / "loop.gguf"
    made["symlink-loop"].symlink_to("loop.gguf")
    for kind, crafted in crafted_damage().items():  # headers only the validated reader refuses
        made[kind] = crafted.write(folder / f"{kind}.gguf")
    if sys.platform.startswith("linux"):  # a file that opens but cannot be read: EIO at offset 0
        made["unreadable"] = folder / "unreadable.gguf"
        made["unreadable"].symlink_to("/proc/self/mem")
    return made


def test_damaged_models_in_the_models_folder_are_listed_disabled_with_the_reason(make_window, gui_models,
                                                                                  tmp_path, qtbot):
    paths = app_paths(tmp_path / "data")
    damaged = damaged_models(paths.models_dir, gui_models.main)
    window = make_window(main_model=str(gui_models.main), draft_model="", drafter="lookup")
    wait_loaded(qtbot, window)
    bar = window.model_bar
    for kind, path in damaged.items():
        option = bar.option_for(str(path))
        if kind == "symlink-loop" and option is None:
            continue  # not every platform lists a link that loops
        if kind == "directory":
            assert option is None, "a folder is not a model: the registry does not list it"
            continue
        assert option is not None and not option.enabled and option.reason, kind
        assert "unreadable" in option.label and not bar.is_draft_item_enabled(str(path)), kind
    assert window.controller.loaded.main_path == str(gui_models.main)


def test_a_damaged_main_model_in_the_settings_is_reported_not_fatal(make_window, gui_models, tmp_path, qtbot):
    window = make_window(main_model=str(gui_models.truncated), recent_main=(str(gui_models.truncated),))
    qtbot.waitUntil(lambda: not window.controller.loading, timeout=30_000)
    assert window.isVisible() and window.controller.loaded is None and "truncated" in window.error_text()
    assert window.model_bar.main_combo.itemText(0) == "truncated.gguf (unreadable)"
    assert still_usable(window)


def test_html_in_a_model_name_is_shown_as_text(make_window, gui_models, tmp_path, qtbot):
    name = '<img src="/dev/zero"><b>bold</b>'
    models = tmp_path / "named"
    models.mkdir()
    main = write_tiny_model(models / "html-name.gguf", TinySpec(seed=0, name=name))
    incompatible = write_tiny_model(models / "assistant.gguf", TinySpec(architecture="gemma4-assistant", name=name))
    window = make_window(main_model=str(main), draft_model="", drafter="lookup")
    wait_loaded(qtbot, window)
    status = window.model_bar.status
    assert status.textFormat() == Qt.TextFormat.PlainText and name in status.full_text
    assert html.escape(name) in status.toolTip()

    window.controller.load_pair(str(main), str(incompatible))  # past the bar: the worker's own refusal names both
    qtbot.waitUntil(lambda: not window.controller.loading, timeout=30_000)
    assert name in window.error_text() and "cannot draft" in window.error_text()
    assert window.banner._label.textFormat() == Qt.TextFormat.PlainText


def test_a_chat_template_too_costly_to_render_is_named_in_the_banner(make_window, qtbot, tmp_path, monkeypatch):
    from app.core.chat import prompt as chat

    monkeypatch.setattr(chat, "RENDER_TIME_LIMIT_S", 0.2)
    slow = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}" + CHATML_TEMPLATE
    model = write_tiny_model(tmp_path / "slow.gguf", TinySpec(chat_template=slow))
    window = make_window(main_model=str(model), max_tokens=4)
    wait_loaded(qtbot, window)
    window.controller.send_message("the cat")
    wait_idle(qtbot, window)
    assert window.banner.kind == "warning" and "took longer than 0.2 s" in window.banner.text()
    c = window.controller
    assert [m.role for m in c.store.messages(c.conversation_id)] == ["user", "assistant"]

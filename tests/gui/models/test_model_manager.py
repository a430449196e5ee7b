"""The model manager dialog, offscreen, on a qasync loop and a local fake Hugging Face Hub."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication

from app.core.gguf.pair_check import OTHER_VOCABULARY_NOTE
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.gui.models.manager import ModelManagerDialog
from app.models.download import local_path, partial_path
from app.models.hub import HubClient
from app.models.registry import ModelRegistry
from app.paths import app_paths
from tests.gui.conftest import ARTIFACTS, MACHINE, TIMEOUT_MS
from tests.models.fakehub import MAIN_FILE, TINY_REPO

@pytest.fixture
def paths(tmp_path):
    return app_paths(tmp_path / "data").ensure()


@pytest.fixture
def make_dialog(qtbot, qloop, paths, hub):
    dialogs = []

    def make() -> ModelManagerDialog:
        dialog = ModelManagerDialog(paths, hub_factory=lambda token: HubClient(endpoint=hub.url, token=token),
                                    loop=qloop, machine=MACHINE)
        qtbot.addWidget(dialog)
        dialog.resize(1100, 760)
        dialog.show()
        dialogs.append(dialog)
        return dialog

    yield make
    for dialog in dialogs:
        dialog.shutdown()
        qtbot.waitUntil(lambda: not dialog.busy, timeout=TIMEOUT_MS)


@pytest.fixture
def installed(paths, tmp_path):
    """A main model, a smaller same-family draft and a model with another vocabulary (it drafts through
    text), installed."""
    src = tmp_path / "src"
    registry = ModelRegistry(paths.models_dir)
    main = registry.import_file(write_tiny_model(src / "tiny-chat-2M-F32.gguf",
                                                 TinySpec(seed=0, n_layer=4, name="Tiny Chat 2M")))
    draft = registry.import_file(write_tiny_model(src / "tiny-chat-1M-F32.gguf", TinySpec(seed=1, name="Tiny Chat 1M")))
    other = registry.import_file(write_tiny_model(src / "french-F32.gguf", TinySpec(seed=2, other_vocab=True,
                                                                                      name="French")))
    return main.path, draft.path, other.path


def _column(table, col: int = 0) -> list[str]:
    return [table.item(r, col).text() for r in range(table.rowCount())]


def _select(table, text: str) -> None:
    table.selectRow(_column(table).index(text))


def _search_and_open_repo(qtbot, dialog) -> None:
    dialog.tabs.setCurrentIndex(2)
    dialog.download_tab.search_edit.setText("tiny")
    qtbot.mouseClick(dialog.download_tab.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.download_tab.results_table.rowCount() == 4, timeout=TIMEOUT_MS)
    _select(dialog.download_tab.results_table, TINY_REPO)
    qtbot.waitUntil(lambda: dialog.download_tab.files_table.rowCount() == 2 and "tests" in dialog.download_tab.card_label.text(),
                    timeout=TIMEOUT_MS)


def test_search_results_and_files_appear(qtbot, make_dialog):
    dialog = make_dialog()
    _search_and_open_repo(qtbot, dialog)
    repos = _column(dialog.download_tab.results_table)
    assert repos[0] == "test-org/Tiny-Other-GGUF", "most downloaded first"
    assert TINY_REPO in repos
    assert sorted(_column(dialog.download_tab.files_table)) == [MAIN_FILE, "tiny-chat-draft-Q8_0.gguf"]
    assert "Q8_0" in _column(dialog.download_tab.files_table, 2)
    assert "A tiny llama-architecture model" in dialog.download_tab.card_label.text()
    assert dialog.banner.text() == ""


def test_search_error_is_shown_in_the_banner(qtbot, make_dialog):
    dialog = make_dialog()
    dialog.download_tab.search_edit.setText("  ")
    qtbot.mouseClick(dialog.download_tab.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Type something" in dialog.banner.text(), timeout=TIMEOUT_MS)


def test_download_shows_progress_and_finishes(qtbot, make_dialog, hub, paths):
    hub.chunk_delay_s = 0.03
    dialog = make_dialog()
    _search_and_open_repo(qtbot, dialog)
    _select(dialog.download_tab.files_table, MAIN_FILE)
    qtbot.mouseClick(dialog.download_tab.download_button, Qt.MouseButton.LeftButton)
    key = f"{TINY_REPO}/{MAIN_FILE}"
    qtbot.waitUntil(lambda: key in dialog.downloads_panel.rows, timeout=TIMEOUT_MS)
    row = dialog.downloads_panel.rows[key]
    qtbot.waitUntil(lambda: 0 < row.bar.value() < 1000 and " of " in row.status.text(), timeout=TIMEOUT_MS)
    assert row.cancel_button.isVisible() and not row.resume_button.isVisible()
    assert "/s" in row.status.text()
    qtbot.waitUntil(lambda: row.state == "done", timeout=TIMEOUT_MS)
    assert row.bar.value() == 1000
    assert MAIN_FILE in _column(dialog.installed_tab.table)
    assert local_path(paths.models_dir, TINY_REPO, MAIN_FILE).read_bytes() == hub.repos[TINY_REPO].files[MAIN_FILE]
    assert "installed list" in dialog.banner.text()


def test_cancelled_download_resumes(qtbot, make_dialog, hub, paths):
    hub.stall_after[MAIN_FILE] = 200_000
    dialog = make_dialog()
    _search_and_open_repo(qtbot, dialog)
    _select(dialog.download_tab.files_table, MAIN_FILE)
    qtbot.mouseClick(dialog.download_tab.download_button, Qt.MouseButton.LeftButton)
    partial = partial_path(local_path(paths.models_dir, TINY_REPO, MAIN_FILE))
    qtbot.waitUntil(lambda: partial.exists() and partial.stat().st_size >= 200_000, timeout=TIMEOUT_MS)
    row = dialog.downloads_panel.rows[f"{TINY_REPO}/{MAIN_FILE}"]
    qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: row.state == "paused", timeout=TIMEOUT_MS)
    assert row.resume_button.isVisible() and not row.cancel_button.isVisible()
    assert "resumes" in row.status.text()
    assert MAIN_FILE not in _column(dialog.installed_tab.table)

    hub.release.set()
    qtbot.mouseClick(row.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: row.state == "done", timeout=TIMEOUT_MS)
    assert hub.file_requests(MAIN_FILE)[-1].headers.get("Range") == "bytes=200000-"
    assert MAIN_FILE in _column(dialog.installed_tab.table)


def test_interrupted_download_is_offered_for_resume_when_reopened(qtbot, make_dialog, hub, paths):
    hub.stall_after[MAIN_FILE] = 100_000
    first = make_dialog()
    _search_and_open_repo(qtbot, first)
    _select(first.download_tab.files_table, MAIN_FILE)
    qtbot.mouseClick(first.download_tab.download_button, Qt.MouseButton.LeftButton)
    partial = partial_path(local_path(paths.models_dir, TINY_REPO, MAIN_FILE))
    qtbot.waitUntil(lambda: partial.exists() and partial.stat().st_size >= 100_000, timeout=TIMEOUT_MS)
    first.close()                                     # closing pauses the download
    qtbot.waitUntil(lambda: not first.busy, timeout=TIMEOUT_MS)

    hub.release.set()
    second = make_dialog()
    row = second.downloads_panel.rows[f"{TINY_REPO}/{MAIN_FILE}"]
    assert row.state == "paused" and row.resume_button.isVisible()
    assert 0 < row.bar.value() < 1000
    qtbot.mouseClick(row.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: row.state == "done", timeout=TIMEOUT_MS)
    assert hub.file_requests(MAIN_FILE)[-1].headers.get("Range") == "bytes=100000-"


def test_choosing_a_pair_emits_pair_chosen(qtbot, make_dialog, installed):
    main, draft, other = installed
    dialog = make_dialog()
    dialog.tabs.setCurrentIndex(1)
    assert dialog.pairing_tab.main_combo.currentData() == str(main), "the largest model is the default main model"
    # the same vocabulary first; another vocabulary drafts too, and says what it costs
    assert _column(dialog.pairing_tab.drafts_table) == [draft.name, other.name]
    assert "same family" in dialog.pairing_tab.drafts_table.item(0, 2).text()
    assert OTHER_VOCABULARY_NOTE in dialog.pairing_tab.drafts_table.item(1, 2).text()
    assert _column(dialog.pairing_tab.incompatible_table) == []
    with qtbot.waitSignal(dialog.pair_chosen, timeout=TIMEOUT_MS) as blocker:
        qtbot.mouseClick(dialog.pairing_tab.use_pair_button, Qt.MouseButton.LeftButton)
    assert blocker.args == [str(main), str(draft)]
    with qtbot.waitSignal(dialog.pair_chosen, timeout=TIMEOUT_MS) as blocker:
        qtbot.mouseClick(dialog.pairing_tab.main_only_button, Qt.MouseButton.LeftButton)
    assert blocker.args == [str(main), ""]


def test_alone_the_chosen_pair_is_what_the_chat_opens_with(qtbot, qloop, paths, installed):
    from app.gui.app import open_model_manager_alone
    from app.storage.settings import SettingsStore

    main, draft, _ = installed
    dialog = open_model_manager_alone(paths, loop=qloop, machine=MACHINE)
    qtbot.addWidget(dialog)
    try:
        dialog.tabs.setCurrentIndex(1)
        qtbot.mouseClick(dialog.pairing_tab.use_pair_button, Qt.MouseButton.LeftButton)
        settings = SettingsStore(paths.settings_file).load()
        assert (settings.main_model, settings.draft_model) == (str(main), str(draft))
        assert settings.recent_main[0] == str(main)
    finally:
        dialog.shutdown()
        qtbot.waitUntil(lambda: not dialog.busy, timeout=TIMEOUT_MS)


def test_installed_tab_shows_metadata_and_deletes_with_confirmation(qtbot, make_dialog, installed):
    main, draft, other = installed
    dialog = make_dialog()
    assert sorted(_column(dialog.installed_tab.table)) == sorted(p.name for p in installed)
    row = _column(dialog.installed_tab.table).index(main.name)
    assert dialog.installed_tab.table.item(row, 1).text() == "llama"
    assert dialog.installed_tab.table.item(row, 7).text() == "yes"
    assert dialog.installed_tab.table.item(row, 8).text() == "fits"
    assert "3 models" in dialog.installed_tab.disk_label.text()

    _select(dialog.installed_tab.table, other.name)
    dialog.installed_tab.confirm = lambda text: False
    qtbot.mouseClick(dialog.installed_tab.delete_button, Qt.MouseButton.LeftButton)
    assert other.exists()
    asked = []
    dialog.installed_tab.confirm = lambda text: asked.append(text) or True
    qtbot.mouseClick(dialog.installed_tab.delete_button, Qt.MouseButton.LeftButton)
    assert "Delete french-F32.gguf" in asked[0]
    assert not other.exists()
    assert other.name not in _column(dialog.installed_tab.table)
    assert "Deleted" in dialog.banner.text()


def test_drop_imports_gguf_files(qtbot, make_dialog, tmp_path):
    dialog = make_dialog()
    dropped = write_tiny_model(tmp_path / "dropped-F32.gguf", TinySpec(seed=5))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(dropped)), QUrl.fromLocalFile(str(tmp_path / "notes.txt"))])
    event = QDropEvent(QPointF(50, 50), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    dialog.dropEvent(event)
    qtbot.waitUntil(lambda: "dropped-F32.gguf" in _column(dialog.installed_tab.table), timeout=TIMEOUT_MS)
    assert "Imported dropped-F32.gguf" in dialog.banner.text()

    dialog.installed_tab.choose_files = lambda: [str(dropped)]
    qtbot.mouseClick(dialog.installed_tab.import_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "already installed" in dialog.banner.text(), timeout=TIMEOUT_MS)


def test_recommended_pairs_download_and_use(qtbot, make_dialog, hub, paths):
    dialog = make_dialog()
    dialog.tabs.setCurrentIndex(3)
    titles = _column(dialog.catalog_tab.table)
    assert any("Qwen2.5-Coder 7B" in t for t in titles) and any("Gemma 3 12B" in t for t in titles)
    pair = dialog.catalog_tab.catalog[0]
    dialog.catalog_tab.table.selectRow(0)
    qtbot.mouseClick(dialog.catalog_tab.use_pair_button, Qt.MouseButton.LeftButton)
    assert "Download" in dialog.banner.text() and "first" in dialog.banner.text()

    # install the pair's files where a download puts them, then "Use pair" chooses them
    for model in (pair.main, pair.draft):
        write_tiny_model(local_path(paths.models_dir, model.repo_id, model.filename), TinySpec(seed=0))
    dialog.refresh_installed()
    dialog.catalog_tab.table.selectRow(0)
    assert dialog.catalog_tab.table.item(0, 5).text() == "both"
    with qtbot.waitSignal(dialog.pair_chosen, timeout=TIMEOUT_MS) as blocker:
        qtbot.mouseClick(dialog.catalog_tab.use_pair_button, Qt.MouseButton.LeftButton)
    assert blocker.args == [str(local_path(paths.models_dir, pair.main.repo_id, pair.main.filename)),
                            str(local_path(paths.models_dir, pair.draft.repo_id, pair.draft.filename))]

    # "Download pair" asks the hub for a repository the fake does not have: a clear error, no traceback
    dialog.catalog_tab.table.selectRow(1)
    qtbot.mouseClick(dialog.catalog_tab.download_pair_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "no such repository" in dialog.banner.text(), timeout=TIMEOUT_MS)


def test_screenshot(qtbot, make_dialog, hub, installed, paths):
    hub.stall_after[MAIN_FILE] = 300_000
    dialog = make_dialog()
    _search_and_open_repo(qtbot, dialog)
    _select(dialog.download_tab.files_table, MAIN_FILE)
    qtbot.mouseClick(dialog.download_tab.download_button, Qt.MouseButton.LeftButton)
    partial = partial_path(local_path(paths.models_dir, TINY_REPO, MAIN_FILE))
    qtbot.waitUntil(lambda: partial.exists() and partial.stat().st_size >= 300_000, timeout=TIMEOUT_MS)
    row = dialog.downloads_panel.rows[f"{TINY_REPO}/{MAIN_FILE}"]
    qtbot.waitUntil(lambda: row.status.text().startswith("300.0 KB of 739.7 KB"), timeout=TIMEOUT_MS)
    ARTIFACTS.mkdir(exist_ok=True)
    dialog.tabs.setCurrentIndex(2)
    assert dialog.grab().save(str(ARTIFACTS / "model_manager_download.png"))
    dialog.tabs.setCurrentIndex(0)
    dialog.installed_tab.table.selectRow(0)
    assert dialog.grab().save(str(ARTIFACTS / "model_manager.png"))
    dialog.tabs.setCurrentIndex(1)
    assert dialog.grab().save(str(ARTIFACTS / "model_manager_pairing.png"))
    dialog.tabs.setCurrentIndex(3)
    dialog.catalog_tab.table.selectRow(0)
    assert "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF" in dialog.catalog_tab.details.text()
    assert dialog.grab().save(str(ARTIFACTS / "model_manager_catalog.png"))
    assert Path(ARTIFACTS / "model_manager.png").stat().st_size > 10_000


def test_opened_from_the_chat_window_sets_its_pair(qtbot, make_window, installed, paths, monkeypatch):
    """The production path: MainWindow builds ModelManagerDialog(paths, parent) on its own qasync loop."""
    import app.gui.models.manager.session as manager_module

    main, draft, _ = installed
    window = make_window(data_dir=paths.data_dir.parent)
    chosen = []
    monkeypatch.setattr(window, "set_model_pair", lambda m, d: chosen.append((m, d)) or True)
    window.open_model_manager()
    dialog = window.model_manager
    try:
        assert isinstance(dialog, ModelManagerDialog)
        assert dialog.loop is manager_module._SHARED_LOOP and dialog.loop is asyncio.get_running_loop()
        dialog.tabs.setCurrentIndex(1)
        qtbot.mouseClick(dialog.pairing_tab.use_pair_button, Qt.MouseButton.LeftButton)
        assert chosen == [(str(main), str(draft))]
        dialog.import_paths([str(write_tiny_model(paths.data_dir.parent / "x" / "extra.gguf"))])
        qtbot.waitUntil(lambda: "extra.gguf" in _column(dialog.installed_tab.table), timeout=TIMEOUT_MS)
    finally:
        dialog.shutdown()
        qtbot.waitUntil(lambda: not dialog.busy, timeout=TIMEOUT_MS)
        loop = manager_module._SHARED_LOOP
        manager_module._SHARED_LOOP = None
        qtbot.wait(50)
        qtbot_app = QApplication.instance()
        qtbot_app.aboutToQuit.disconnect(loop._after_run_forever)
        loop._after_run_forever()
        loop._QEventLoop__is_running = False
        asyncio.events._set_running_loop(None)
        loop.close()
        asyncio.set_event_loop(None)


def test_the_search_shows_a_busy_bar_while_the_hub_is_asked(qtbot, make_dialog, monkeypatch):
    import threading

    release = threading.Event()
    search = HubClient.search
    monkeypatch.setattr(HubClient, "search", lambda self, query: release.wait(TIMEOUT_MS / 1000) and search(self, query))
    dialog = make_dialog()
    tab = dialog.download_tab
    dialog.tabs.setCurrentIndex(2)
    assert not tab.busy_bar.isVisibleTo(dialog)
    tab.search_edit.setText("tiny")
    qtbot.mouseClick(tab.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.busy_bar.isVisibleTo(dialog), timeout=TIMEOUT_MS)
    assert tab.busy_label.text() == "Searching Hugging Face…" and not tab.search_button.isEnabled()
    release.set()
    qtbot.waitUntil(lambda: tab.results_table.rowCount() == 4, timeout=TIMEOUT_MS)
    assert not tab.busy_bar.isVisibleTo(dialog) and not tab.busy_label.isVisibleTo(dialog)


def test_a_pairs_details_say_the_speed_to_expect_on_this_machine(qtbot, qloop, paths, hub):
    from app.models.memory import MachineMemory

    two_cores = MachineMemory(16 * 10**9, 12 * 10**9, False, None, None, cpu_cores=2)
    dialog = ModelManagerDialog(paths, hub_factory=lambda token: HubClient(endpoint=hub.url, token=token),
                                loop=qloop, machine=two_cores)
    qtbot.addWidget(dialog)
    try:
        tab = dialog.catalog_tab
        big = next(i for i, p in enumerate(tab.catalog) if p.main.params == "27B")
        tab.table.selectRow(big)
        assert "tokens/s here before drafting (too slow)" in tab.details.text()
    finally:
        dialog.shutdown()
        qtbot.waitUntil(lambda: not dialog.busy, timeout=TIMEOUT_MS)

"""The first-run panel: the recommended pairs that fit this machine, one click to download a pair
(progress shown in the panel) and an import, against a local fake Hugging Face Hub."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.gui.models.first_run import FirstRunPanel
from app.gui.models.manager.session import ManagerSession
from app.models.catalog import CatalogModel, CatalogPair
from app.models.download import local_path
from app.models.hub import HubClient
from app.models.memory import MachineMemory
from app.models.recommend import recommend
from app.models.registry import ModelRegistry
from app.paths import app_paths
from tests.gui.conftest import ARTIFACTS, MACHINE, TIMEOUT_MS
from tests.models.fakehub import DRAFT_FILE, MAIN_FILE, TINY_REPO


def catalog_pair(pair_id: str, memory_gb: float, repo: str = TINY_REPO) -> CatalogPair:
    return CatalogPair(id=pair_id, title=f"Tiny Chat {pair_id}", family="tiny-chat", use="chat",
                       main=CatalogModel(repo, MAIN_FILE, "tiny-chat", "2M", 0.0007),
                       draft=CatalogModel(repo, DRAFT_FILE, "tiny-chat", "1M", 0.0004),
                       expected_memory_gb=memory_gb, context=2048)


CATALOG = [catalog_pair("small", 0.01), catalog_pair("huge", 100.0), catalog_pair("tight", 12.0),
           catalog_pair("medium", 4.0)]


@pytest.fixture
def paths(tmp_path):
    return app_paths(tmp_path / "data").ensure()


@pytest.fixture
def make_panel(qtbot, qloop, paths, hub):
    panels = []

    def make(catalog=CATALOG) -> FirstRunPanel:
        panel = FirstRunPanel(paths, machine=MACHINE, catalog=catalog, session_factory=lambda: ManagerSession(
            paths, hub_factory=lambda token: HubClient(endpoint=hub.url, token=token), loop=qloop, machine=MACHINE))
        qtbot.addWidget(panel)
        panel.resize(760, 600)
        panel.show()
        panels.append(panel)
        return panel

    yield make
    for panel in panels:
        panel.shutdown()
        qtbot.waitUntil(lambda: not panel.busy, timeout=TIMEOUT_MS)


def test_only_pairs_that_fit_are_offered_comfortable_ones_first():
    offered = [(r.pair.id, r.fit.verdict) for r in recommend(CATALOG, MACHINE)]
    assert offered == [("medium", "fits"), ("small", "fits"), ("tight", "tight")]
    no_ram = MachineMemory(None, None, False, None, None)
    assert {r.fit.verdict for r in recommend(CATALOG, no_ram)} == {"unknown"}


def test_the_panel_lists_the_pairs_that_fit(qtbot, make_panel):
    panel = make_panel()
    assert list(panel.download_buttons) == ["medium", "small", "tight"]
    assert panel.none_fit.isHidden()
    assert make_panel(catalog=[catalog_pair("huge", 100.0)]).none_fit.isVisible()


def test_download_installs_the_pair_and_shows_progress_here(qtbot, make_panel, hub, paths):
    hub.chunk_delay_s = 0.02
    panel = make_panel()
    with qtbot.waitSignal(panel.pair_ready, timeout=TIMEOUT_MS) as ready:
        qtbot.mouseClick(panel.download_buttons["small"], Qt.MouseButton.LeftButton)
        assert not panel.download_buttons["medium"].isEnabled(), "one pair at a time"
        qtbot.waitUntil(lambda: panel.downloads_panel is not None and len(panel.downloads_panel.rows) == 2,
                        timeout=TIMEOUT_MS)
        row = panel.downloads_panel.rows[f"{TINY_REPO}/{MAIN_FILE}"]
        qtbot.waitUntil(lambda: " of " in row.status.text(), timeout=TIMEOUT_MS)
        ARTIFACTS.mkdir(exist_ok=True)
        assert panel.grab().save(str(ARTIFACTS / "first_run_downloading.png"))
    main, draft = (local_path(paths.models_dir, TINY_REPO, name) for name in (MAIN_FILE, DRAFT_FILE))
    assert ready.args == [str(main), str(draft)]
    assert {m.path for m in ModelRegistry(paths.models_dir).list()} == {main, draft}
    assert main.read_bytes() == hub.repos[TINY_REPO].files[MAIN_FILE]
    assert "is installed" in panel.banner.text()
    assert all(button.isEnabled() for button in panel.download_buttons.values())
    panel.update_visibility(has_models=True)
    assert panel.isHidden()


def test_a_failed_download_is_reported_and_can_be_tried_again(qtbot, make_panel):
    panel = make_panel(catalog=[catalog_pair("missing", 0.01, repo="test-org/No-Such-GGUF")])
    qtbot.mouseClick(panel.download_buttons["missing"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "no such repository" in panel.banner.text(), timeout=TIMEOUT_MS)
    assert panel.download_buttons["missing"].isEnabled() and panel.downloading is None


def test_import_installs_a_gguf_file(qtbot, make_panel, paths, tmp_path):
    panel = make_panel()
    source = write_tiny_model(tmp_path / "mine" / "my-model.gguf", TinySpec(seed=3))
    panel.choose_files = lambda: [str(source)]
    with qtbot.waitSignal(panel.model_imported, timeout=TIMEOUT_MS) as imported:
        qtbot.mouseClick(panel.import_button, Qt.MouseButton.LeftButton)
    [model] = ModelRegistry(paths.models_dir).list()
    assert imported.args == [[str(model.path)]] and model.name == "my-model.gguf" and model.usable
    assert "Imported my-model.gguf" in panel.banner.text()


def test_visible_while_nothing_is_installed(qtbot, make_panel):
    panel = make_panel()
    panel.update_visibility(has_models=False)
    assert panel.isVisible()
    panel.update_visibility(has_models=True)
    assert panel.isHidden()
    assert panel._session is None, "nothing is started until a button is clicked"


def test_a_download_error_shows_where_the_user_looks_and_leaves_no_empty_box(qtbot, qloop, paths, hub):
    """Issue 41, fault 6: with the pairs scrolled to the end, a failed download's message appeared at the
    top, out of sight, and an empty "Downloading" box was left at the bottom."""
    from PySide6.QtWidgets import QScrollArea

    catalog = [catalog_pair(f"missing{i}", 0.01, repo="test-org/No-Such-GGUF") for i in range(12)]
    panel = FirstRunPanel(paths, machine=MACHINE, catalog=catalog, session_factory=lambda: ManagerSession(
        paths, hub_factory=lambda token: HubClient(endpoint=hub.url, token=token), loop=qloop, machine=MACHINE))
    area = QScrollArea()   # as the window holds it
    area.setWidgetResizable(True)
    area.setWidget(panel)
    qtbot.addWidget(area)
    area.resize(760, 400)
    area.show()
    bar = area.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    bar.setValue(bar.maximum())
    qtbot.mouseClick(panel.download_buttons["missing11"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "no such repository" in panel.banner.text(), timeout=TIMEOUT_MS)
    assert not panel.banner.visibleRegion().isEmpty(), "the message is in sight"
    assert panel.downloads_panel.isHidden(), "no download started: no empty Downloading box"
    panel.shutdown()
    qtbot.waitUntil(lambda: not panel.busy, timeout=TIMEOUT_MS)


def test_each_pair_says_the_speed_to_expect_where_the_cores_are_known(qtbot, paths):
    from PySide6.QtWidgets import QLabel

    two_cores = MachineMemory(16 * 10**9, 12 * 10**9, False, None, None, cpu_cores=2)
    panel = FirstRunPanel(paths, machine=two_cores, catalog=[catalog_pair("small", 0.01)])
    qtbot.addWidget(panel)
    texts = [label.text() for label in panel.findChildren(QLabel)]
    assert any("tokens/s here before drafting" in text for text in texts)


def test_the_offers_wrap_to_fit_a_1000_px_windows_chat_column(qtbot, paths):
    """At 1000x700 the chat column is about 400 px: the offers' long lines ran past it, the Download
    buttons off screen."""
    from app.models.catalog import load_catalog

    two_cores = MachineMemory(16 * 10**9, 12 * 10**9, False, None, None, cpu_cores=2)
    panel = FirstRunPanel(paths, machine=two_cores, catalog=load_catalog())
    qtbot.addWidget(panel)
    assert panel.download_buttons and panel.minimumSizeHint().width() <= 400

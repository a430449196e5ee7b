"""Settings' suffix index row: the switch edits the setting, the limit is an editor like the others, and
Clear says how large the index is and empties it."""

from __future__ import annotations

from app.core.speculation.suffix_store import SuffixStore, list_indexes
from app.gui.panels.settings_panel import SettingsPanel
from app.storage.settings import Settings


def test_the_switch_the_limit_and_clear(qtbot, tmp_path):
    store = SuffixStore(tmp_path / "model", "fp", "model", 8 << 20)
    store.open()
    store.append(list(range(300_000)))   # 1.1 MB
    panel = SettingsPanel(Settings(), suffix_folder=tmp_path)
    qtbot.addWidget(panel)
    assert panel.suffix_on.isChecked() and panel.editors["suffix_index_mb"].value() == 64
    assert panel.suffix_clear.text() == "Clear (1.1 MB)" and panel.suffix_clear.isEnabled()
    with qtbot.waitSignal(panel.edited) as edited:
        panel.suffix_on.setChecked(False)
    assert edited.args == ["suffix_index", False] and panel.settings().suffix_index is False
    with qtbot.waitSignal(panel.edited) as edited:
        panel.editors["suffix_index_mb"].setValue(16)
    assert edited.args == ["suffix_index_mb", 16]
    panel.suffix_clear.click()
    assert list_indexes(tmp_path) == [] and panel.suffix_clear.text() == "Clear (0.0 MB)"
    assert not panel.suffix_clear.isEnabled()


def test_the_speculation_panel_names_each_drafter_that_drafted(qtbot):
    from app.gui.panels.stats_panel import StatsPanel
    from app.gui.runtime.live_stats import LiveStats

    panel = StatsPanel()
    qtbot.addWidget(panel)
    live = LiveStats()
    live.by_drafter = {"lookup": [14, 12], "suffix": [31, 30], "model": [0, 0]}
    panel.update_from(live)
    assert panel.drafters.text() == "Prompt lookup: 12 of 14 accepted  ·  Suffix index: 30 of 31 accepted"
    assert not panel.drafters.isHidden()
    panel.clear()
    assert panel.drafters.isHidden()
    live.by_drafter = {"suffix": [31, 30]}
    panel.update_from(live)
    assert panel.drafters.isHidden()   # one drafter did it all: the tiles say it


def test_tokens_from_the_suffix_index_have_a_colour_of_their_own():
    from app.gui.chat.render import render_runs
    from app.gui.widgets import theme

    html = render_runs([["a", "draft"], ["b", "suffix"], ["c", "main"]])
    assert theme.SUFFIX_BG in html and theme.DRAFT_BG in html and theme.MAIN_BG in html
    assert len({theme.SUFFIX_BG, theme.DRAFT_BG, theme.MAIN_BG}) == 3

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

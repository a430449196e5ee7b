"""Combo boxes list the core's choices, with their labels, and hand back the core's kinds."""

from __future__ import annotations

from app.core.params import DrafterKind, PolicyName
from app.gui.models.model_bar import ModelBar
from app.gui.panels.settings_panel import SettingsPanel
from app.storage.settings import Settings


def items(combo) -> list[tuple[str, str]]:
    return [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())]


def test_the_policy_combo_lists_every_policy_and_edits_the_settings(qtbot):
    panel = SettingsPanel(Settings(draft_policy=PolicyName.PMIN))
    qtbot.addWidget(panel)
    assert items(panel.policy) == [(p.label, p.value) for p in PolicyName]
    assert panel.policy.currentData() == "pmin"
    with qtbot.waitSignal(panel.changed) as changed:
        panel.policy.setCurrentIndex(panel.policy.findData(PolicyName.FIXED))
    assert changed.args[0].draft_policy is PolicyName.FIXED


def test_the_drafter_combo_lists_every_kind(qtbot, tmp_path):
    bar = ModelBar(tmp_path)
    qtbot.addWidget(bar)
    assert items(bar.drafter) == [(k.label, k.value) for k in DrafterKind]
    bar.set_drafter(DrafterKind.LOOKUP)
    assert bar.current_drafter() is DrafterKind.LOOKUP

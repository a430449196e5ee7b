"""The speculation panel says when the auto policy is still learning this machine's speed."""

from __future__ import annotations

from app.gui.stats_panel import LEARNING, StatsPanel


def test_the_panel_says_while_the_policy_is_learning(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    assert panel.learning.text() == ""
    panel.set_learning(True)
    assert panel.learning.text() == LEARNING == "learning this machine's speed…"
    panel.set_learning(False)
    assert panel.learning.text() == ""
    panel.set_learning(True)
    panel.clear()   # cleared for a new answer: its first round says again
    assert panel.learning.text() == ""

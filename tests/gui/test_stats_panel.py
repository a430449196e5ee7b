"""The speculation panel says when the auto policy is still learning this machine's speed."""

from __future__ import annotations

from app.gui.stats_panel import LEARNING, StatsPanel


def test_the_panel_says_while_the_policy_is_learning(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    assert panel.learning.text() == LEARNING == "learning this machine's speed…"
    assert not panel.is_learning_shown()
    panel.set_learning(True)
    assert panel.is_learning_shown()
    panel.set_learning(False)
    assert not panel.is_learning_shown()
    panel.set_learning(True)
    panel.clear()   # cleared for a new answer: its first round says again
    assert not panel.is_learning_shown()

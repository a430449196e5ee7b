"""The speculation panel says when the auto policy is still learning this machine's speed: the
stats follow the rounds' ``learning`` flag and the summary's final word."""

from __future__ import annotations

from dataclasses import replace

from app.core.speculation.events import Round, Summary
from app.gui.runtime.live_stats import LiveStats
from app.gui.panels.stats_panel import LEARNING, NOT_REPORTED, StatsPanel


def summary(learning: bool) -> Summary:
    return Summary(prompt_tokens=4, prompt_tokens_evaluated=4, generated_tokens=3, ttft_s=0.1, prompt_s=0.1,
                   generation_s=0.2, drafted=2, accepted=1, main_tokens=2, rounds=2, drafting_rounds=1,
                   draft_s=0.01, verify_s=0.2, policy_learning=learning)


def test_the_panel_says_while_the_policy_is_learning(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    live = LiveStats()
    assert panel.learning.text() == LEARNING == "learning this machine's speed…"
    assert not panel.is_learning_shown()

    live.add(Round(0, 2, 1, 0.01, 0.1, 2, at_s=0.2, learning=True))
    panel.update_from(live)
    assert panel.is_learning_shown()
    live.add(Round(1, 0, 0, 0.0, 0.1, 3, at_s=0.3, learning=False))
    panel.update_from(live)
    assert not panel.is_learning_shown()

    live.add(summary(learning=True))   # the summary has the final word
    panel.update_from(live)
    assert panel.is_learning_shown()
    panel.clear()   # cleared for a new answer: its first round says again
    assert not panel.is_learning_shown()


def test_a_server_that_reports_no_drafting_reads_not_reported_instead_of_zeros(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    live = LiveStats()
    live.add(replace(summary(learning=False), drafted=0, accepted=0, drafting_rounds=0, speculation_reported=False))
    panel.update_from(live)
    values = panel.values()
    assert values["drafted"] == values["accepted"] == values["acceptance"] == NOT_REPORTED == "not reported"
    assert values["ttft"] == "100 ms"

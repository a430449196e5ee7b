"""The speculation panel says when the auto policy is still learning this machine's speed: the
stats follow the rounds' ``learning`` flag and the summary's final word. It shows the answer's
estimated speedup over the main model alone once the summary brings it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtWidgets import QLabel

from app.core.speculation.events import Round, Summary
from app.gui.panels.stats_panel import DASH, LEARNING, NOT_REPORTED, StatsPanel
from app.gui.runtime.live_stats import LiveStats


def summary(learning: bool, estimated_speedup: float | None = None) -> Summary:
    return Summary(prompt_tokens=4, prompt_tokens_evaluated=4, generated_tokens=3, ttft_s=0.1, prompt_s=0.1,
                   generation_s=0.2, drafted=2, accepted=1, main_tokens=2, rounds=2, drafting_rounds=1,
                   draft_s=0.01, verify_s=0.2, policy_learning=learning, estimated_speedup=estimated_speedup)


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


def _tile_name(panel: StatsPanel, key: str) -> str:
    tile = panel._values[key].parentWidget()
    return [label.text() for label in tile.findChildren(QLabel) if label is not panel._values[key]][0]


def test_the_estimated_speedup_tile_shows_the_summarys_estimate(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    assert _tile_name(panel, "speedup") == "vs main alone (est.)"
    assert panel.values()["speedup"] == DASH == "–"

    live = LiveStats()
    live.add(Round(0, 2, 1, 0.01, 0.1, 2, at_s=0.2))
    panel.update_from(live)
    assert panel.values()["speedup"] == DASH, "no estimate while the answer is generating"

    live.add(summary(learning=False, estimated_speedup=1.4321))
    panel.update_from(live)
    assert panel.values()["speedup"] == "≈1.4x"
    panel.clear()   # a new answer starts without one
    assert panel.values()["speedup"] == DASH


@pytest.mark.parametrize("estimate,shown", [(None, "–"), (0.86, "≈0.9x"), (2.0, "≈2.0x"), (12.34, "≈12.3x")])
def test_the_speedup_tile_reads_a_dash_without_an_estimate(qtbot, estimate, shown):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    live = LiveStats()
    live.add(summary(learning=False, estimated_speedup=estimate))   # e.g. a fixed policy: no cost model
    panel.update_from(live)
    assert panel.values()["speedup"] == shown


def test_the_panel_shows_the_threads_each_model_decoded_with(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    live = LiveStats()
    live.add(Round(0, 2, 1, 0.01, 0.1, 2, at_s=0.2))
    panel.update_from(live)
    assert panel.threads.text() == ""            # known with the summary
    live.add(replace(summary(learning=False), threads=1, draft_threads=2))
    panel.update_from(live)
    assert panel.threads.text() == "threads: main 1 · draft 2 (learned)"
    live.add(replace(summary(learning=False), threads=2, draft_threads=0))   # no draft model
    panel.update_from(live)
    assert panel.threads.text() == "threads: main 2 (learned)"
    live.add(summary(learning=False))            # a remote server: not known
    panel.update_from(live)
    assert panel.threads.text() == ""
    live.add(replace(summary(learning=False), threads=2))
    panel.update_from(live)
    panel.clear()
    assert panel.threads.text() == ""


def test_the_panel_splits_speed_and_acceptance_by_part_when_an_answer_had_more_than_one(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    live = LiveStats()
    live.add(Round(0, 4, 4, 0.01, 0.1, 6, at_s=0.5, part="reasoning"))
    panel.update_from(live)
    assert panel.parts.isHidden() and panel.parts.text() == ""   # one part: nothing to split
    live.add(Round(1, 4, 1, 0.01, 0.1, 8, at_s=1.5, part="answer"))
    panel.update_from(live)
    assert not panel.parts.isHidden()
    assert panel.parts.text().splitlines() == ["thinking 10.0 tok/s, 100% accepted", "answer 2.0 tok/s, 25% accepted"]
    panel.clear()
    assert panel.parts.isHidden()

"""Issue 41, fault 6: the Speculation tab shows the numbers of the conversation on screen. It kept the
previous conversation's after a switch and was empty after a restart; it now shows the last answer's
saved numbers (tiles, acceptance by draft position), or nothing where the conversation has no answer."""

from __future__ import annotations

from app.gui.panels.stats_panel import DASH
from app.gui.runtime.live_stats import stored_stats
from tests.gui.conftest import send, wait_idle, wait_loaded

SAVED = ("tps_message", "speedup", "ttft", "prompt_tps", "mean_accepted", "drafted", "accepted", "acceptance")


def shown(window) -> dict[str, str]:
    return {key: text for key, text in window.stats_panel.values().items() if key in SAVED}


def test_the_panel_follows_the_conversation_shown_and_survives_a_restart(make_window, gui_models, qtbot):
    window = make_window(main_model=str(gui_models.main), draft_model=str(gui_models.same), drafter="model",
                         max_tokens=24)
    wait_loaded(qtbot, window)
    assert send(window, "hello")
    wait_idle(qtbot, window)
    answered = shown(window)
    positions = window.charts.point_counts()["positions"]
    assert answered["drafted"] not in ("0", DASH) and positions > 0
    first = window.controller.conversation_id

    window.controller.new_conversation()   # no answer yet: nothing to show
    assert set(shown(window).values()) == {DASH}
    assert window.charts.point_counts()["positions"] == 0
    window.controller.select_conversation(first)
    assert shown(window) == answered and window.charts.point_counts()["positions"] == positions
    window.controller.new_conversation()
    window.close()

    again = make_window()
    wait_loaded(qtbot, again)
    again.controller.select_conversation(first)
    assert shown(again) == answered


def test_an_answer_saved_without_its_numbers_shows_nothing():
    assert stored_stats({}) is None
    assert stored_stats({"stop_reason": "interrupted", "generated_tokens": 3}) is None

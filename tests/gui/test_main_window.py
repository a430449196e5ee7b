"""The main window on the real engine with tiny GGUF models."""

from __future__ import annotations

import threading
import time

import pytest
from PySide6.QtCore import QObject, Qt, QTimer, Signal

from tests.gui.conftest import LOAD_TIMEOUT_MS, send, wait_answering, wait_idle, wait_loaded

# With the default system prompt of TEST_SETTINGS ("You are terse."), the tiny main model answers
# this prompt greedily with 1000 tokens before its end token: long enough to watch and to stop.
LONG_PROMPT = "write a long story"


def assistant_messages(window):
    return [m for m in window.controller.store.messages(window.controller.conversation_id) if m.role == "assistant"]


def paced(monkeypatch, seconds_per_token: float) -> None:
    """The engine yields its tokens no faster than a real model would: the tiny one makes 600 in
    50 ms on a fast machine, less than one repaint of the window."""
    from app.core.engine import Engine
    from app.core.speculation.events import TokenPiece

    generate = Engine.generate

    def paced_generate(self, *args, **kwargs):
        for event in generate(self, *args, **kwargs):
            if isinstance(event, TokenPiece):
                time.sleep(seconds_per_token * len(event.token_ids))
            yield event

    monkeypatch.setattr(Engine, "generate", paced_generate)


def test_send_streams_the_answer_and_feeds_stats_and_charts(loaded_window, qtbot, monkeypatch):
    window = loaded_window
    paced(monkeypatch, 0.002)
    window.settings_panel.set_value("max_tokens", 600)
    batches = []
    window.controller.worker.batch.connect(lambda batch: batches.append(len(batch.events)))
    shown_lengths = []
    sampler = QTimer()
    sampler.timeout.connect(lambda: shown_lengths.append(len(window.chat_view.messages()[-1].text)))
    assert send(window, LONG_PROMPT)
    assert window.composer.input.toPlainText() == "", "the text sent leaves the message box"
    sampler.start(20)
    wait_idle(qtbot, window)
    sampler.stop()

    [answer] = assistant_messages(window)
    assert len(batches) >= 2, "pieces arrive in several batches while the answer is made"
    assert any(0 < n < len(answer.content) for n in shown_lengths), "the view showed a partial answer"
    assert window.chat_view.messages()[-1].text == answer.content
    assert answer.stats["generated_tokens"] == 600
    assert answer.stats["drafted"] > 0 and answer.stats["accepted"] == answer.stats["drafted"]
    values = window.stats_panel.values()
    assert values["drafted"] == str(answer.stats["drafted"])
    assert values["acceptance"] == "100%"
    assert float(values["tps_message"]) > 0
    counts = window.charts.point_counts()
    assert counts["tps"] > 0 and counts["round_acceptance"] > 0 and counts["positions"] == 4
    footer = window.chat_view.messages()[-1].footer.text()
    assert "600 tokens" in footer and f"drafted {answer.stats['drafted']}" in footer and "(100%)" in footer


def test_enter_sends_and_shift_enter_adds_a_line(loaded_window, qtbot):
    window = loaded_window
    box = window.composer.input
    qtbot.keyClicks(box, "first line")
    qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box, "second line")
    assert box.toPlainText() == "first line\nsecond line"
    qtbot.keyClick(box, Qt.Key.Key_Return)
    wait_idle(qtbot, window)
    user = [m for m in window.controller.store.messages(window.controller.conversation_id) if m.role == "user"]
    assert [m.content for m in user] == ["first line\nsecond line"]
    assert box.toPlainText() == ""


def test_stop_ends_generation_within_one_round(loaded_window, qtbot):
    window = loaded_window
    window.settings_panel.set_value("max_tokens", 1000)
    send(window, LONG_PROMPT)
    generation = wait_answering(qtbot, window)
    stopped_at = time.monotonic()
    window.composer.stop_button.click()
    wait_idle(qtbot, window)

    summary = generation.live.summary
    assert summary.stop_reason.value == "cancel"
    assert summary.generated_tokens < 1000
    rounds_after_stop = [t for t in generation.live.round_ends_s if generation.started_at + t > stopped_at]
    assert len(rounds_after_stop) <= 1
    [answer] = assistant_messages(window)
    assert answer.content and answer.stats["stop_reason"] == "cancel"
    assert "stopped" in window.chat_view.messages()[-1].footer.text()


def test_regenerate_shows_a_new_version_of_the_last_answer(loaded_window, qtbot):
    window = loaded_window
    send(window, "hello")
    wait_idle(qtbot, window)
    [first] = assistant_messages(window)
    window.settings_panel.set_value("temperature", 1.0)
    window.settings_panel.set_value("seed", 7)
    window.composer.regenerate_button.click()
    wait_idle(qtbot, window)

    [second] = assistant_messages(window)
    assert second.id != first.id and window.controller.store.message(first.id).content == first.content
    assert second.stats["generated_tokens"] > 0
    widgets = window.chat_view.messages()
    assert [w.role for w in widgets] == ["user", "assistant"]
    assert widgets[-1].message_id == second.id and widgets[-1].text == second.content
    assert widgets[-1].versions.label.text() == "2/2" and widgets[-1].versions.isVisibleTo(window)


def test_conversation_survives_closing_and_reopening(make_window, gui_models, qtbot, tmp_path):
    data = tmp_path / "persist"
    window = make_window(data, main_model=str(gui_models.main), draft_model=str(gui_models.same))
    wait_loaded(qtbot, window)
    window.composer.system_prompt.setText("Answer in French.")
    window.composer.system_prompt.editingFinished.emit()
    send(window, "remember this conversation")
    wait_idle(qtbot, window)
    conversation_id = window.controller.conversation_id
    [answer] = assistant_messages(window)
    window.close()

    again = make_window(data)
    wait_loaded(qtbot, again)  # the last pair is loaded again on start
    loaded = again.controller.loaded
    assert loaded.main_path == str(gui_models.main) and loaded.draft_path == str(gui_models.same)
    assert again.controller.conversation_id == conversation_id
    assert again.conversation_list.titles() == ["remember this conversation"]
    assert again.composer.system_prompt_text() == "Answer in French."
    widgets = again.chat_view.messages()
    assert [(w.role, w.text) for w in widgets] == [("user", "remember this conversation"),
                                                  ("assistant", answer.content)]
    assert widgets[-1].footer.text().startswith(f"{answer.stats['generation_tps']:.1f} tok/s")
    again.controller.set_colour_tokens(True)
    assert widgets[-1].showing_origins()
    assert "background-color" in widgets[-1].body.toHtml()


def test_incompatible_draft_cannot_be_selected(loaded_window, gui_models, qtbot):
    window = loaded_window
    bar = window.model_bar
    assert not window.set_model_pair(str(gui_models.main), str(gui_models.incompatible))
    assert "cannot draft" in window.error_text() and "MTP drafter" in window.error_text()
    assert not bar.is_draft_item_enabled(str(gui_models.incompatible))
    assert "MTP drafter for gemma4" in bar.option_for(str(gui_models.incompatible)).reason
    assert bar.is_draft_item_enabled(str(gui_models.same)) and bar.is_draft_item_enabled(str(gui_models.other))
    assert bar.current_draft() != str(gui_models.incompatible)
    assert not window.controller.loading and window.controller.loaded.draft_path == str(gui_models.same)


@pytest.mark.parametrize("broken", ["garbage", "truncated"])
def test_broken_model_file_shows_an_error_and_the_app_keeps_working(loaded_window, gui_models, qtbot, broken):
    window = loaded_window
    send(window, "before")
    wait_idle(qtbot, window)
    assert window.set_model_pair(str(getattr(gui_models, broken)), None)
    qtbot.waitUntil(lambda: not window.controller.loading, timeout=30_000)
    assert window.error_text()
    assert window.controller.loaded.main_path == str(gui_models.main), "the working pair stays loaded"
    assert send(window, "after")
    wait_idle(qtbot, window)
    asked = [m.content for m in window.controller.store.messages(window.controller.conversation_id) if m.role == "user"]
    assert asked == ["before", "after"]
    assert len(assistant_messages(window)) == 2


def test_prompt_too_long_is_reported_and_the_conversation_kept(make_window, gui_models, qtbot):
    window = make_window(main_model=str(gui_models.main), n_ctx=64)
    wait_loaded(qtbot, window)
    send(window, "the cat is on the mat " * 20)
    wait_idle(qtbot, window)
    assert "context" in window.error_text()
    messages = window.controller.store.messages(window.controller.conversation_id)
    assert [m.role for m in messages] == ["user"]
    assert [w.role for w in window.chat_view.messages()] == ["user"]


def test_sending_without_a_model_keeps_the_text(make_window, qtbot):
    window = make_window()
    qtbot.keyClicks(window.composer.input, "anyone there?")
    qtbot.keyClick(window.composer.input, Qt.Key.Key_Return)
    assert "No model is installed yet" in window.error_text()   # nothing installed: the first step is to get one
    assert window.composer.input.toPlainText() == "anyone there?"


def test_the_gui_thread_goes_on_while_the_engine_thread_is_held_mid_answer(loaded_window, qtbot, monkeypatch):
    """The GUI thread never waits for the engine's: with the engine held between two tokens of an
    answer, the window's event loop keeps turning (a timer's ticks are counted while it is held).
    Counted, not timed: the timed check (worst gap between 10 ms
    ticks under 100 ms) failed on a loaded 2-core machine; it is a benchmark now, scripts/gui_stall_bench.py."""
    from app.core.engine import Engine
    from app.core.speculation.events import TokenPiece

    held, resumed, release = threading.Event(), threading.Event(), threading.Event()
    generate = Engine.generate

    def held_generate(self, *args, **kwargs):
        pieces = 0
        for event in generate(self, *args, **kwargs):
            yield event
            pieces += isinstance(event, TokenPiece)
            if pieces == 20 and not held.is_set():
                held.set()
                release.wait(60)   # a guard: a GUI that waited for this thread would wait this long
                resumed.set()

    monkeypatch.setattr(Engine, "generate", held_generate)
    window = loaded_window
    window.settings_panel.set_value("max_tokens", 200)
    ticks_while_held = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks_while_held.append(True) if held.is_set() and not resumed.is_set() else None)
    timer.start(10)
    try:
        send(window, LONG_PROMPT)
        qtbot.waitUntil(held.is_set, timeout=30_000)
        qtbot.waitUntil(lambda: len(ticks_while_held) >= 10, timeout=30_000)
        assert not resumed.is_set()   # all of it happened while the engine was held
    finally:
        release.set()
        timer.stop()
    wait_idle(qtbot, window)


def test_compare_measures_speedup_and_identity(loaded_window, qtbot):
    window = loaded_window
    send(window, "hello")
    wait_idle(qtbot, window)
    [answer] = assistant_messages(window)
    cleared = []
    real_clear = window.speculation.clear
    window.speculation.clear = lambda: (cleared.append(True), real_clear())
    window.chat_view.messages()[-1].compare_button.click()
    wait_idle(qtbot, window)
    assert cleared == [], "a compare keeps the answer's charts"

    result = window.controller.last_compare
    assert result is not None and result.identical  # greedy speculation reproduces the main model
    assert result.speculative.drafted > 0 and result.baseline.drafted == 0
    stored = window.controller.store.message(answer.id)
    assert stored.stats["speedup"] == pytest.approx(result.speedup)
    assert stored.stats["compare_identical"] is True
    assert window.chat_view.messages()[-1].footer.text().endswith(f"{result.speedup:.1f}x measured by Compare")
    assert "identical" in window.banner.text() and window.banner.kind == "info"
    assert stored.content == answer.content


def test_quitting_mid_generation_keeps_the_partial_answer(make_window, gui_models, qtbot, tmp_path):
    data = tmp_path / "quit"
    window = make_window(data, main_model=str(gui_models.main), draft_model=str(gui_models.same), max_tokens=1000)
    wait_loaded(qtbot, window)
    send(window, LONG_PROMPT)
    wait_answering(qtbot, window)
    window.close()
    assert not window.controller.thread.isRunning()

    again = make_window(data)
    [answer] = [m for m in again.controller.store.messages(again.controller.conversation_id) if m.role == "assistant"]
    assert answer.content and answer.stats.get("stop_reason") == "cancel"
    assert answer.stats["generated_tokens"] < 1000


def test_conversations_new_rename_delete_and_search(loaded_window, qtbot):
    window = loaded_window
    send(window, "alpha question")
    wait_idle(qtbot, window)
    first = window.controller.conversation_id
    second = window.controller.new_conversation()
    send(window, "beta question")
    wait_idle(qtbot, window)
    assert window.conversation_list.titles() == ["beta question", "alpha question"]

    window.controller.rename_conversation(second, "Renamed beta")
    window.conversation_list.set_search_text("alpha")
    assert window.conversation_list.titles() == ["alpha question"]
    window.conversation_list.set_search_text("")
    assert set(window.conversation_list.titles()) == {"Renamed beta", "alpha question"}

    window.controller.select_conversation(first)
    assert [w.text for w in window.chat_view.messages()][0] == "alpha question"
    window.controller.delete_conversation(first)
    assert window.conversation_list.titles() == ["Renamed beta"]
    assert window.controller.conversation_id == second and window.controller.store.messages(first) == []


def test_settings_persist_between_windows(make_window, tmp_path, qtbot):
    data = tmp_path / "settings"
    window = make_window(data)
    window.settings_panel.set_value("temperature", 1.25)
    window.settings_panel.set_value("draft_max", 7)
    window.model_bar.set_drafter("lookup")
    window.close()
    again = make_window(data)
    assert again.controller.settings.temperature == pytest.approx(1.25) and again.controller.settings.draft_max == 7
    assert again.settings_panel.editors["draft_max"].value() == 7
    assert again.model_bar.current_drafter() == "lookup" and again.controller.settings.drafter == "lookup"


def test_drafting_off_decodes_with_the_main_model_alone(loaded_window, qtbot):
    window = loaded_window
    window.model_bar.set_drafter("none")
    send(window, "hello")
    wait_idle(qtbot, window)
    [answer] = assistant_messages(window)
    assert answer.stats["drafter"] == "none" and answer.stats["drafted"] == 0


def test_model_manager_pair_is_loaded(make_window, gui_models, qtbot, monkeypatch):
    class FakeDialog(QObject):
        pair_chosen = Signal(str, str)
        models_changed = Signal()

        def __init__(self, paths, parent=None):
            super().__init__(parent)
            self.paths = paths

        def show(self):
            self.pair_chosen.emit(str(gui_models.main), str(gui_models.other))

    monkeypatch.setattr("app.gui.models.manager.ModelManagerDialog", FakeDialog)
    window = make_window()
    window.model_manager_action.trigger()
    wait_loaded(qtbot, window)
    assert window.model_manager.paths == window.paths
    loaded = window.controller.loaded
    assert loaded.main_path == str(gui_models.main) and loaded.draft_path == str(gui_models.other)


def test_a_damaged_settings_file_is_reported_and_defaults_used(make_window, tmp_path):
    from app.paths import app_paths

    paths = app_paths(tmp_path / "damaged").ensure()
    paths.settings_file.write_text("[1, 2")
    window = make_window(tmp_path / "damaged")
    assert window.banner.kind == "warning" and "damaged" in window.banner.text()
    assert list(paths.config_dir.glob("settings.json.corrupt-*"))


def test_a_draft_for_an_unreadable_main_model_names_the_main_models_problem(make_window, gui_models):
    window = make_window()
    assert not window.set_model_pair(str(gui_models.garbage), str(gui_models.same))
    assert "garbage.gguf" in window.error_text() and not window.controller.loading


def test_a_pair_that_drafts_with_its_own_mtp_heads_loads_alone_and_drafts_with_them(make_window, qtbot, tmp_path):
    """What the catalog's "Use pair" and the first-run panel do for a Qwen3.6 MTP pair: the main
    model alone, drafting with its MTP heads, answering what it answers alone."""
    from app.core.params import DrafterKind
    from app.core.gguf.tiny import TinySpec, write_tiny_model

    qwen35 = write_tiny_model(tmp_path / "models" / "qwen35.gguf", TinySpec(architecture="qwen35", name="tiny-qwen35"))
    window = make_window()
    assert window.set_model_pair(str(qwen35), None)
    wait_loaded(qtbot, window)
    assert window.model_bar.current_drafter() is DrafterKind.MTP
    assert window.controller.drafter() is DrafterKind.MTP
    assert send(window, "the cat")
    wait_idle(qtbot, window)
    assert not window.error_text()


def test_a_pair_with_an_mtp_drafter_file_drafts_with_it(make_window, qtbot, tmp_path):
    """What "Use pair" does for a Gemma 4 pair: the main and its MTP drafter, drafting with MTP."""
    from app.core.params import DrafterKind
    from app.core.gguf.tiny import TinySpec, write_tiny_model

    gemma = write_tiny_model(tmp_path / "models" / "gemma4.gguf", TinySpec(architecture="gemma4", name="tiny-gemma4"))
    assistant = write_tiny_model(tmp_path / "models" / "gemma4-assistant.gguf",
                                 TinySpec(architecture="gemma4-assistant", name="tiny-gemma4-assistant"))
    window = make_window()
    assert window.set_model_pair(str(gemma), str(assistant))
    wait_loaded(qtbot, window)
    assert window.model_bar.current_drafter() is DrafterKind.MTP
    assert window.controller.drafter() is DrafterKind.MTP
    assert send(window, "the cat")
    wait_idle(qtbot, window)
    assert not window.error_text()


def test_a_first_start_loads_the_largest_model_that_fits_with_its_best_draft(make_window, qtbot, tmp_path):
    """No pair chosen yet, models installed: the window loads one, no clicks, and says which and why."""
    from app.core.gguf.tiny import TinySpec, write_tiny_model
    from app.models.registry import ModelRegistry
    from app.paths import app_paths

    paths = app_paths(tmp_path / "first").ensure()
    registry = ModelRegistry(paths.models_dir)
    src = tmp_path / "src"
    big = registry.import_file(write_tiny_model(src / "tiny-big.gguf", TinySpec(seed=0, n_layer=6, name="Tiny 3M")))
    small = registry.import_file(write_tiny_model(src / "tiny-small.gguf", TinySpec(seed=1, name="Tiny 1M")))
    registry.import_file(write_tiny_model(src / "other.gguf", TinySpec(seed=2, n_layer=4, other_vocab=True)))
    window = make_window(tmp_path / "first")
    wait_loaded(qtbot, window)
    loaded = window.controller.loaded
    assert (loaded.main_path, loaded.draft_path) == (str(big.path), str(small.path))
    assert "Chose tiny-big.gguf as the main model" in window.banner.text()
    assert window.chat_view._placeholder.text() == "Type a message below and press Enter."
    assert window.controller.settings.main_model == str(big.path)   # the next start opens it again


def test_undo_puts_back_the_draft_the_bar_replaced(make_window, gui_models, qtbot):
    window = make_window()
    bar = window.model_bar
    bar.set_main(str(gui_models.main))
    bar.set_draft("")
    bar.draft_chosen.emit(str(gui_models.main), str(gui_models.same), "")
    assert "Undo" == window.banner.action_button.text() and window.banner.action_button.isVisible()
    bar.set_draft(str(gui_models.same))
    window.banner.action_button.click()
    assert bar.current_draft() == "" and not window.banner.text()


def test_an_answer_is_saved_as_it_streams_so_a_kill_loses_at_most_seconds(loaded_window, qtbot, monkeypatch):
    """kill -9 mid-answer once left an empty row: the answer is now saved as it streams (its first text
    at once, then every SAVE_PARTIAL_S), marked interrupted until it ends. What another connection
    reads from the database is what survives a kill."""
    import time as clock

    from app.core.engine import Engine
    from app.storage.conversations import ConversationStore

    generate = Engine.generate

    def slow(self, *args, **kwargs):
        for event in generate(self, *args, **kwargs):
            clock.sleep(0.02)
            yield event

    monkeypatch.setattr(Engine, "generate", slow)
    window = loaded_window
    send(window, "hello")
    active = wait_answering(qtbot, window)
    reader = ConversationStore(window.paths.conversations_db)   # another connection, as after a restart
    qtbot.waitUntil(lambda: reader.message(active.message_id).content != "", timeout=5000)
    saved = reader.message(active.message_id)
    assert saved.stats == {"stop_reason": "interrupted"}
    window.chat_view.show_messages([saved])
    assert window.chat_view.messages()[-1].footer.text().startswith("interrupted")
    wait_idle(qtbot, window)
    assert window.controller.store.message(active.message_id).stats["stop_reason"] != "interrupted"


def test_the_keyboard_stops_switches_regenerates_and_focuses(loaded_window, qtbot):
    """Esc stops an answer; Tab leaves the message box instead of typing a tab; Ctrl+Tab and
    Ctrl+Shift+Tab (and Ctrl+PgDown/PgUp) switch conversations; Ctrl+L goes to the message box; Ctrl+R
    answers again; Help lists every one of them."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    window = loaded_window
    box = window.composer.input
    ctrl = Qt.KeyboardModifier.ControlModifier

    def press(widget, key, modifiers=Qt.KeyboardModifier.NoModifier) -> None:
        window.activateWindow()   # shortcuts reach the active window only
        qtbot.waitUntil(window.isActiveWindow)
        QTest.keyClick(widget, key, modifiers)

    window.settings_panel.set_value("max_tokens", 1000)
    send(window, LONG_PROMPT)
    generation = wait_answering(qtbot, window)
    press(box, Qt.Key.Key_Escape)
    wait_idle(qtbot, window)
    assert generation.live.summary.stop_reason.value == "cancel"
    window.settings_panel.set_value("max_tokens", 24)

    first = window.controller.conversation_id
    second = window.controller.new_conversation()
    send(window, "second question")
    wait_idle(qtbot, window)
    box.setFocus()
    press(box, Qt.Key.Key_Tab)
    assert "\t" not in box.toPlainText() and not box.hasFocus()
    press(window, Qt.Key.Key_L, ctrl)
    assert box.hasFocus()
    press(box, Qt.Key.Key_Tab, ctrl)
    assert window.controller.conversation_id == first and "\t" not in box.toPlainText()
    press(box, Qt.Key.Key_PageUp, ctrl)
    assert window.controller.conversation_id == second

    before = [m.id for m in window.controller.store.messages(second)]
    press(window, Qt.Key.Key_R, ctrl)
    assert window.controller.is_generating
    wait_idle(qtbot, window)
    after = [m.id for m in window.controller.store.messages(second)]
    assert after[:-1] == before[:-1] and after[-1] != before[-1]   # the last answer, made again

    listed = dict(window.shortcut_rows())
    for keys in ("Esc", "Ctrl+R", "Ctrl+L", "Ctrl+Tab, Ctrl+PgDown", "Ctrl+Shift+Tab, Ctrl+PgUp", "F1"):
        assert keys in listed, listed


def test_editing_a_setting_keeps_the_pair_loaded_since_the_window_opened(make_window, gui_models, qtbot):
    """The settings panel saved its whole copy of the settings, made when the window opened: a setting
    edited after loading another pair put the first pair back in the settings file, and the next start
    opened it. Found while making the window remember its columns (issue 41, fault 4)."""
    window = make_window(main_model=str(gui_models.main), draft_model="", drafter="lookup")
    wait_loaded(qtbot, window)
    window.set_model_pair(str(gui_models.other), str(gui_models.same))
    qtbot.waitUntil(lambda: not window.controller.loading, timeout=LOAD_TIMEOUT_MS)
    window.settings_panel.set_value("max_tokens", 77)
    window.close()
    again = make_window()
    wait_loaded(qtbot, again)
    assert (again.controller.loaded.main_path, again.controller.loaded.draft_path) == (str(gui_models.other),
                                                                                       str(gui_models.same))
    assert again.controller.settings.max_tokens == 77

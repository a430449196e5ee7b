"""The chat controller on the real engine with tiny GGUF models, and no window at all."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

import pytest

from app.gui.runtime.chat_values import ShownConversation
from app.gui.runtime.controller import BUSY_WITH_MODELS, REPAINT_MS, ChatController
from app.gui.runtime.live_stats import LiveStats
from app.paths import app_paths
from app.storage.settings import SettingsStore
from tests.gui.conftest import ANSWER_TIMEOUT_MS, LOAD_TIMEOUT_MS, TEST_SETTINGS

LONG_PROMPT = "write a long story"   # the tiny main model answers it with 1000 tokens
SIGNALS = ("conversations_changed", "conversation_shown", "message_added", "message_removed", "messages_cut",
           "message_updated",
           "answer_started", "answer_updated", "answer_finished", "generating_changed", "busy_changed", "notice",
           "notice_cleared", "notice_replaced", "model_loading", "models_loaded", "models_unloaded", "colour_tokens_changed")


class Seen:
    """Every signal the controller sent, in order, with the time it arrived."""

    def __init__(self, controller: ChatController):
        self.events: list[tuple[str, tuple, float]] = []
        for name in SIGNALS:
            getattr(controller, name).connect(self._recorder(name))

    def _recorder(self, name: str):
        return lambda *args: self.events.append((name, args, time.monotonic()))

    def __call__(self, name: str) -> list[tuple]:
        return [args for n, args, _ in self.events if n == name]

    def times(self, name: str) -> list[float]:
        return [t for n, _, t in self.events if n == name]

    def notices(self, kind: str) -> list[str]:
        return [text for text, k in self("notice") if k == kind]


@pytest.fixture
def make(qtbot, tmp_path):
    """A started controller (and what it signals) on a data dir with test settings."""
    made: list[ChatController] = []

    def make_one(data_dir: Path | None = None, **changes) -> tuple[ChatController, Seen]:
        paths = app_paths(data_dir or tmp_path / "data")
        if changes or not paths.settings_file.exists():
            SettingsStore(paths.settings_file).save(replace(TEST_SETTINGS, **changes))
        controller = ChatController(paths, SettingsStore(paths.settings_file))
        made.append(controller)
        seen = Seen(controller)
        controller.start()
        return controller, seen

    yield make_one
    for controller in made:
        controller.shut_down()


def wait_loaded(qtbot, c: ChatController) -> None:
    qtbot.waitUntil(lambda: not c.loading, timeout=LOAD_TIMEOUT_MS)


def wait_idle(qtbot, c: ChatController) -> None:
    qtbot.waitUntil(lambda: not c.is_busy, timeout=ANSWER_TIMEOUT_MS)


@pytest.fixture
def loaded(make, gui_models, qtbot):
    """A controller with the tiny main model and its same-weights draft loaded."""
    def load(data_dir: Path | None = None, **changes) -> tuple[ChatController, Seen]:
        c, seen = make(data_dir, drafter="model", **changes)
        assert c.load_pair(str(gui_models.main), str(gui_models.same))
        wait_loaded(qtbot, c)
        assert c.loaded is not None
        return c, seen

    return load


def answers(c: ChatController) -> list:
    return [m for m in c.store.messages(c.conversation_id) if m.role == "assistant"]


def test_an_answer_is_saved_with_its_stats_and_signalled(loaded, qtbot):
    c, seen = loaded()
    assert seen("conversation_shown") == [(ShownConversation(None, "You are terse.", ()),)]
    c.set_system_prompt("Answer in French.")   # no conversation yet: the first message's prompt
    assert c.send_message("  hello  ")
    assert c.is_generating
    wait_idle(qtbot, c)

    [conv] = c.store.conversations()
    assert (conv.title, conv.system_prompt) == ("hello", "Answer in French.")
    [user, answer] = c.store.messages(conv.id)
    assert (user.role, user.content) == ("user", "hello")
    assert answer.content and answer.stats["generated_tokens"] > 0
    assert answer.stats["drafted"] > 0 and answer.stats["accepted"] == answer.stats["drafted"]
    assert answer.stats["drafter"] == "model" and answer.stats["main_model"] == c.loaded.main_name
    assert c.prompt_messages(conv.id) == [{"role": "system", "content": "Answer in French."},
                                          {"role": "user", "content": "hello"},
                                          {"role": "assistant", "content": answer.content}]
    assert c.prompt_messages(conv.id, upto_id=answer.id) == c.prompt_messages(conv.id)[:2]

    assert seen("message_added") == [(user,)]
    assert seen("answer_started") == [(answer.id,)]
    assert seen("answer_finished") == [(answer,)]
    assert seen("generating_changed") == [(True,), (False,)]
    assert seen("busy_changed")[-2:] == [(True,), (False,)]
    message_id, live = seen("answer_updated")[-1]
    assert message_id == answer.id and isinstance(live, LiveStats) and live.text == answer.content
    listed, current = seen("conversations_changed")[-1]
    assert [x.title for x in listed] == ["hello"] and current == conv.id


def test_progress_reaches_the_views_on_the_repaint_timer_not_per_token(loaded, qtbot):
    c, seen = loaded(max_tokens=1000)
    c.send_message(LONG_PROMPT)
    wait_idle(qtbot, c)
    [answer] = answers(c)
    assert answer.stats["generated_tokens"] == 1000
    [started], [finished] = seen.times("answer_started"), seen.times("answer_finished")
    updates = seen.times("answer_updated")
    assert 1 <= len(updates) <= (finished - started) / (REPAINT_MS / 1000) + 2
    gaps = [later - earlier for earlier, later in zip(updates, updates[1:-1])]   # the last comes at the end
    # paced by the timer, not by tokens (one tick run late by a busy machine is followed by a short gap)
    assert not gaps or statistics.median(gaps) >= 0.8 * REPAINT_MS / 1000


def test_stop_keeps_the_partial_answer(loaded, qtbot):
    c, seen = loaded(max_tokens=1000)
    c.send_message(LONG_PROMPT)
    qtbot.waitUntil(lambda: c.active is not None and c.active.live.text != "", timeout=30_000)
    c.stop()
    wait_idle(qtbot, c)
    [answer] = answers(c)
    assert answer.content and answer.stats["stop_reason"] == "cancel"
    assert answer.stats["generated_tokens"] < 1000
    assert seen("answer_finished") == [(answer,)]
    assert c.last_generation.live.summary.stop_reason.value == "cancel"


def test_without_a_model_nothing_starts_and_nothing_is_saved(make):
    c, seen = make()
    assert not c.send_message("anyone there?")
    assert seen.notices("error") == ["No model is loaded. Choose a main model in the bar above and press Load."]
    assert c.store.conversations() == [] and not c.is_busy
    assert not c.regenerate()
    assert seen("answer_started") == []


def test_a_failed_load_keeps_the_pair_loaded_before(loaded, gui_models, qtbot):
    c, seen = loaded()
    before = c.loaded
    assert c.load_pair(str(gui_models.garbage))
    assert c.is_busy and seen("model_loading")[-1] == ("garbage.gguf",)
    wait_loaded(qtbot, c)
    assert c.loaded == before and seen("models_loaded")[-1] == (before,)
    assert seen.notices("error") and seen("models_unloaded") == []
    assert c.send_message("still works")
    wait_idle(qtbot, c)
    assert answers(c)[-1].stats["generated_tokens"] > 0


def test_a_failed_first_load_leaves_no_model(make, gui_models, qtbot):
    c, seen = make()
    assert c.load_pair(str(gui_models.truncated))
    wait_loaded(qtbot, c)
    assert c.loaded is None and seen("models_unloaded") == [()]
    assert "truncated" in seen.notices("error")[-1]
    assert seen("busy_changed") == [(True,), (False,)]


def test_a_generation_that_fails_removes_its_empty_answer(make, gui_models, qtbot):
    c, seen = make(n_ctx=64)
    c.load_pair(str(gui_models.main))
    wait_loaded(qtbot, c)
    c.send_message("the cat is on the mat " * 20)
    wait_idle(qtbot, c)
    [started] = seen("answer_started")
    assert "context" in seen.notices("error")[-1]
    assert [m.role for m in c.store.messages(c.conversation_id)] == ["user"]
    assert seen("message_removed") == [started] and seen("answer_finished") == []


def test_regenerate_shows_a_new_version_of_the_last_answer_and_keeps_the_first(loaded, qtbot):
    c, seen = loaded()
    c.send_message("hello")
    wait_idle(qtbot, c)
    [first] = answers(c)
    c.update_settings(temperature=1.0, seed=7)
    assert c.regenerate()
    wait_idle(qtbot, c)
    [second] = answers(c)
    assert second.id != first.id and (second.version, second.versions) == (2, 2)
    assert second.stats["generated_tokens"] > 0
    assert c.store.message(first.id).stats == first.stats   # the first version keeps its own numbers
    assert seen("messages_cut") == [(first.id,)] and seen("message_removed") == []
    assert seen("answer_started") == [(first.id,), (second.id,)]
    assert [m.role for m in c.store.messages(c.conversation_id)] == ["user", "assistant"]


def test_the_conversation_being_answered_cannot_be_deleted_or_left(loaded, qtbot):
    c, seen = loaded(max_tokens=1000)
    other = c.new_conversation()
    answering = c.new_conversation()
    c.send_message(LONG_PROMPT)
    assert not c.delete_conversation(answering)
    assert seen.notices("error")[-1] == "Stop the answer before deleting its conversation."
    assert not c.select_conversation(other) and c.conversation_id == answering
    assert c.delete_conversation(other) and c.store.get(other) is None
    c.stop()
    wait_idle(qtbot, c)
    assert c.store.get(answering) is not None and answers(c)[0].content


def test_shutting_down_mid_answer_saves_the_partial_answer(loaded, make, qtbot, tmp_path):
    data = tmp_path / "quit"
    c, _ = loaded(data, max_tokens=1000)
    c.send_message(LONG_PROMPT)
    qtbot.waitUntil(lambda: c.active is not None and c.active.live.text != "", timeout=30_000)
    c.shut_down()
    assert not c.thread.isRunning() and c.active is None

    again, seen = make(data)
    [answer] = answers(again)
    assert answer.content and answer.stats["stop_reason"] == "cancel"
    assert answer.stats["generated_tokens"] < 1000
    assert seen("conversation_shown")[-1][0].messages[-1] == answer


def test_models_cannot_change_while_busy_and_nothing_starts_while_loading(loaded, gui_models, qtbot):
    c, seen = loaded(max_tokens=1000)
    c.send_message(LONG_PROMPT)
    assert not c.load_pair(str(gui_models.main))
    assert seen.notices("error")[-1] == BUSY_WITH_MODELS
    c.stop()
    wait_idle(qtbot, c)
    assert c.load_pair(str(gui_models.main), str(gui_models.other))
    assert not c.send_message("too soon") and seen.notices("error")[-1] == "The models are still loading."
    assert not c.can_change_models()
    wait_loaded(qtbot, c)
    assert c.loaded.draft_path == str(gui_models.other)
    assert c.settings.main_model == str(gui_models.main) and c.settings.draft_model == str(gui_models.other)
    assert c.settings.recent_drafts[:2] == (str(gui_models.other), str(gui_models.same))


def test_conversations_are_created_renamed_searched_and_deleted(make):
    c, seen = make()
    alpha = c.new_conversation()
    c.rename_conversation(alpha, "  alpha chat ")
    c.store.add_message(alpha, "user", "first question")
    beta = c.new_conversation("Be brief.")
    c.rename_conversation(beta, "beta chat")
    c.set_search("alpha")
    assert [x.title for x in seen("conversations_changed")[-1][0]] == ["alpha chat"]
    c.set_search("")
    listed, current = seen("conversations_changed")[-1]
    assert [x.title for x in listed] == ["beta chat", "alpha chat"] and current == beta

    assert c.select_conversation(alpha)
    [shown] = seen("conversation_shown")[-1]
    assert (shown.conversation_id, shown.system_prompt) == (alpha, "You are terse.")
    assert [m.content for m in shown.messages] == ["first question"]
    c.set_system_prompt("Be kind.")
    assert c.store.get(alpha).system_prompt == "Be kind."

    assert c.delete_conversation(alpha)
    assert c.conversation_id == beta and seen("conversation_shown")[-1][0].system_prompt == "Be brief."
    assert c.delete_conversation(beta)
    assert c.conversation_id is None
    assert seen("conversation_shown")[-1] == (ShownConversation(None, "You are terse.", ()),)
    assert seen("conversations_changed")[-1] == ([], None)


def test_settings_are_saved_and_signalled_once_per_change(make, tmp_path):
    c, seen = make()
    c.set_colour_tokens(True)
    c.set_colour_tokens(True)
    c.set_drafter("lookup")
    assert seen("colour_tokens_changed") == [(False,), (True,)]
    saved = SettingsStore(app_paths(tmp_path / "data").settings_file).load()
    assert saved.colour_tokens and saved.drafter == "lookup"


def test_compare_adds_the_speedup_to_the_answer(loaded, qtbot):
    c, seen = loaded()
    c.send_message("hello")
    wait_idle(qtbot, c)
    [answer] = answers(c)
    assert c.compare(answer.id)
    assert seen.notices("info")[-1].startswith("Comparing")
    wait_idle(qtbot, c)
    result = c.last_compare
    assert result is not None and result.identical
    [updated] = seen("message_updated")[-1]
    assert updated.id == answer.id and updated.content == answer.content
    assert updated.stats["speedup"] == pytest.approx(result.speedup) and updated.stats["compare_identical"]
    assert "identical" in seen.notices("info")[-1]
    assert seen("answer_started") == [(answer.id,)], "a compare starts no new answer"
    # the line above the chat said which run and how far, each line replacing the one before
    replaced = seen("notice_replaced")
    assert replaced[0][0] == seen.notices("info")[-2] and all(a[1] == b[0] for a, b in zip(replaced, replaced[1:]))
    assert [line for _, line in replaced if "run 1 of 2 (main model alone)" in line]
    assert [line for _, line in replaced if "run 2 of 2 (drafter: Draft model)" in line]

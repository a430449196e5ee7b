"""A thinking model in the window's runtime: the controller asks for thinking on or off per
conversation, keeps the reasoning apart from the answer, and sends it back as the template expects;
the live numbers split the streamed text and time the thinking."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.chat.prompt import render_prompt
from app.core.chat.reasoning import ThinkingFormat
from app.core.gguf.tiny import THINKING_SPEC, THINKING_TEMPLATE, write_tiny_model
from app.core.speculation.events import Origin, Round, Summary, TokenPiece
from app.gui.runtime.chat_values import answer_parts, prompt_messages, thinking_request
from app.gui.runtime.controller import ChatController
from app.gui.runtime.live_stats import LiveStats, format_footer, message_stats
from app.core.frontdoor import LoadedPair
from app.paths import app_paths
from app.storage.settings import SettingsStore
from tests.gui.conftest import ANSWER_TIMEOUT_MS, LOAD_TIMEOUT_MS, TEST_SETTINGS

OPEN = ThinkingFormat("<think>", "</think>", True, "enable_thinking")
CLOSED = ThinkingFormat("<think>", "</think>", False, "enable_thinking")


def piece(text: str, at_s: float, origin: Origin = Origin.MAIN) -> TokenPiece:
    return TokenPiece(text, (1,) * max(1, len(text) // 3), origin, at_s=at_s)


def test_live_numbers_keep_the_reasoning_apart_and_time_it():
    live = LiveStats(thinking=OPEN)
    live.add(piece("Let me ", 1.0))
    assert live.thinking_now and live.reasoning == "Let me" and live.text == ""
    live.add(piece("see.\n</th", 2.0, Origin.DRAFT))
    assert live.thinking_now and live.thinking_s == pytest.approx(1.0)
    live.add(piece("ink>\n\nHello", 13.0))
    live.add(piece(" there.", 14.0, Origin.DRAFT))
    assert not live.thinking_now
    assert live.reasoning == "Let me see." and live.text == "Hello there."
    assert live.runs == [["Hello", "main"], [" there.", "draft"]]   # the answer's runs only
    assert live.thinking_s == pytest.approx(12.0)                   # from its first piece to the one that ended it
    live.add(Summary(4, 4, 9, 1.0, 1.0, 13.0, 0, 0, 9, 4, 0, 0.0, 0.0, text="ignored"))
    assert live.thinking_s == pytest.approx(12.0)


def test_an_answer_cut_off_while_thinking_thought_until_the_end():
    live = LiveStats(thinking=OPEN)
    live.add(piece("Step one", 0.5))
    live.add(Round(0, 0, 0, 0.0, 0.1, 3, at_s=3.5, part="reasoning"))
    live.add(Summary(4, 4, 3, 0.5, 0.5, 3.0, 0, 0, 3, 1, 0, 0.0, 0.0, at_s=3.5))
    assert not live.thinking_now and live.reasoning == "Step one" and live.text == ""
    assert live.thinking_s == pytest.approx(3.0)
    assert answer_parts(live) == ("", "Step one")
    # the summary's whole text is the final word when there is one
    done = replace(live.summary, text="Step one\n</think>\n\nDone.")
    assert answer_parts(live, done) == ("Done.", "Step one")


def test_without_a_thinking_format_nothing_is_split():
    live = LiveStats()
    live.add(piece("<think>x</think>y", 0.2))
    assert live.text == "<think>x</think>y" and live.reasoning == "" and live.thinking_s is None
    assert not live.thinking_now


def test_the_footer_and_the_stored_stats_split_the_parts():
    summary = Summary(4, 4, 30, 0.1, 0.1, 3.0, 20, 12, 18, 8, 6, 0.1, 1.0,
                      by_part=(("reasoning", 16, 12, 20, 1.0), ("answer", 4, 0, 9, 2.0)))
    stats = message_stats(summary, "model", "main", "draft", thinking_s=1.25)
    assert stats["thinking_s"] == 1.25
    footer = format_footer(stats)
    assert footer.splitlines()[1] == "thinking 20.0 tok/s, 75% accepted · answer 4.5 tok/s, 0% accepted"
    one_part = message_stats(replace(summary, by_part=(("answer", 20, 12, 29, 3.0),)), "model", "main", None)
    assert "\n" not in format_footer(one_part)


def test_the_switch_asks_the_template_for_thinking_or_not():
    info = LoadedPair("m", "m", thinking=OPEN, thinking_off=CLOSED)
    assert thinking_request(info, True) == (OPEN, {"enable_thinking": True})
    assert thinking_request(info, False) == (CLOSED, {"enable_thinking": False})
    no_switch = replace(OPEN, switch=None)
    assert thinking_request(replace(info, thinking=no_switch, thinking_off=None), False) == (no_switch, {})
    assert thinking_request(replace(info, thinking=None, thinking_off=None), True) == (None, {})
    assert thinking_request(None, True) == (None, {})


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("thinking") / "thinking.gguf", THINKING_SPEC)


@pytest.fixture
def controller(qtbot, tmp_path, thinking_model):
    paths = app_paths(tmp_path / "data")
    SettingsStore(paths.settings_file).save(replace(TEST_SETTINGS, drafter="lookup", max_tokens=24))
    c = ChatController(paths, SettingsStore(paths.settings_file))
    c.start()
    assert c.load_pair(str(thinking_model))
    qtbot.waitUntil(lambda: not c.loading, timeout=LOAD_TIMEOUT_MS)
    yield c
    c.shut_down()


def _answer(c: ChatController, qtbot, text: str):
    requests = []
    c._generate.connect(requests.append)
    assert c.send_message(text)
    live = c.active.live
    qtbot.waitUntil(lambda: not c.is_busy, timeout=ANSWER_TIMEOUT_MS)
    c._generate.disconnect(requests.append)
    return requests[0], live, [m for m in c.store.messages(c.conversation_id) if m.role == "assistant"][-1]


def test_a_thinking_conversation_keeps_reasoning_apart_and_the_switch_turns_it_off(controller, qtbot):
    c = controller
    assert c.loaded.thinking == OPEN and c.loaded.thinking_off == CLOSED
    request, live, first = _answer(c, qtbot, "hello there")
    assert request.template_variables == {"enable_thinking": True}
    assert live.thinking == OPEN
    # the tiny model's random words begin inside the reasoning block its template opened
    assert first.reasoning and first.reasoning == live.reasoning
    assert first.content == live.text and "<think>" not in first.content and "</think>" not in first.content
    assert first.stats["thinking_s"] == live.thinking_s > 0
    assert "reasoning" in first.stats["by_part"]

    c.set_thinking(False)
    assert c.store.get(c.conversation_id).thinking is False
    request, live, second = _answer(c, qtbot, "and now?")
    assert request.template_variables == {"enable_thinking": False}
    assert live.thinking == CLOSED and not live.thinking_now
    # the earlier reasoning goes back apart from its answer; the template drops it (it is before the last
    # user message), as Qwen3's does
    sent = [m for m in request.messages if m["role"] == "assistant"]
    assert sent == [{"role": "assistant", "content": first.content, "reasoning_content": first.reasoning}]
    rendered = render_prompt(request.messages, THINKING_TEMPLATE, variables=dict(request.template_variables)).text
    assert first.reasoning not in rendered and rendered.endswith("<think>\n\n</think>\n\n")

    c.select_conversation(c.conversation_id)
    assert c.store.get(c.conversation_id).thinking is False
    assert prompt_messages(c.store, c.conversation_id)[2] == sent[0]


def test_a_new_chat_takes_the_switch_set_before_its_first_message(controller, qtbot):
    c = controller
    c.set_thinking(False)
    request, _, _ = _answer(c, qtbot, "hi")
    assert request.template_variables == {"enable_thinking": False}
    assert c.store.get(c.conversation_id).thinking is False

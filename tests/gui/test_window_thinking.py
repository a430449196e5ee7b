"""The window with a thinking model (the tiny one whose template opens a <think> block): its answers
show their reasoning folded, the "Think" switch shows for it alone and is kept per conversation; the
README's thinking screenshot is made by the app under Xvfb."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from app.core.gguf.tiny import THINKING_SPEC, write_tiny_model
from tests.gui.conftest import send, wait_idle, wait_loaded

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def thinking_window(make_window, qtbot, tmp_path):
    model = write_tiny_model(tmp_path / "thinking.gguf", THINKING_SPEC)
    window = make_window(main_model=str(model), draft_model="", drafter="lookup", max_tokens=24)
    wait_loaded(qtbot, window)
    return window


def test_a_thinking_models_answer_shows_its_reasoning_folded_and_the_switch_works(thinking_window, qtbot):
    window = thinking_window
    think = window.composer.think
    assert not think.isHidden() and think.isChecked()
    assert send(window, "hello there")
    wait_idle(qtbot, window)
    widget = [m for m in window.chat_view.messages() if m.role == "assistant"][-1]
    stored = window.controller.store.message(widget.message_id)
    assert stored.reasoning   # the template opened the block: the tiny model's words are its reasoning
    fold = widget.reasoning
    assert not fold.isHidden() and fold.button.text().startswith("▸ Thought for")
    qtbot.mouseClick(fold.button, Qt.MouseButton.LeftButton)
    assert fold.opened and not fold.body.isHidden() and fold.body.toPlainText().strip()   # random words, rendered

    qtbot.mouseClick(think, Qt.MouseButton.LeftButton)   # off for this conversation
    conversation = window.controller.conversation_id
    assert window.controller.store.get(conversation).thinking is False
    assert send(window, "and without thinking?")
    assert window.controller.active.request.template_variables == {"enable_thinking": False}
    wait_idle(qtbot, window)
    window.controller.new_conversation()
    assert think.isChecked()   # a new conversation thinks
    window.controller.select_conversation(conversation)
    assert not think.isChecked()


def test_the_switch_is_hidden_for_a_model_that_does_not_think(loaded_window):
    assert loaded_window.controller.loaded.thinking is None
    assert loaded_window.composer.think.isHidden()


@pytest.mark.skipif(shutil.which("xvfb-run") is None, reason="xvfb-run is not installed (apt-get install xvfb)")
def test_the_thinking_screenshot_is_made_by_the_app(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY")}
    done = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1280x800x24", sys.executable,
                           "scripts/thinking_screenshot.py", "--out", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "folded: ▸ Thought for" in done.stdout and "opened: ▾ Thought for" in done.stdout
    assert "panel parts: thinking " in done.stdout and " | answer " in done.stdout
    image = QImage(str(tmp_path / "thinking.png"))
    assert (image.width(), image.height()) == (1280, 800)

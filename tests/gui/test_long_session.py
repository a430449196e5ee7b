"""A long session: hundreds of answers and many thousands of Qt calls and signals, then quitting
while busy. PySide6 6.12.0 on Python 3.11 dropped a reference to None on each Qt call returning
nothing and to True on each emit, so such a session aborted ("none_dealloc", "bool_dealloc")."""

from __future__ import annotations

import sys

from PySide6.QtCore import QCoreApplication, QObject, Signal
from PySide6.QtWidgets import QLabel

from tests.gui.conftest import wait_answering, wait_idle, wait_loaded

ANSWERS = 200
CALLS = 5000
LONG_PROMPT = "write a long story"   # the tiny model answers it with 1000 tokens


class Emitter(QObject):
    flag = Signal(bool)
    number = Signal(int)


def test_qt_calls_and_signals_keep_their_references_to_none_and_true(qapp):
    label = QLabel()
    emitter = Emitter()
    emitter.flag.connect(lambda value: None)
    emitter.number.connect(lambda value: None)
    none_before, true_before = sys.getrefcount(None), sys.getrefcount(True)
    for i in range(200):
        label.setText("x")
        emitter.flag.emit(True)
        emitter.number.emit(i)
        QCoreApplication.processEvents()
    # other code running meanwhile moves these by a few; the fault moved them by hundreds
    assert sys.getrefcount(None) > none_before - 50
    assert sys.getrefcount(True) > true_before - 50


def test_hundreds_of_answers_then_quitting_while_busy(make_window, gui_models, qtbot, tmp_path):
    data = tmp_path / "long"
    window = make_window(data, main_model=str(gui_models.main), draft_model=str(gui_models.same), drafter="model",
                         max_tokens=4)
    wait_loaded(qtbot, window)
    assert window.controller.send_message("hello")
    wait_idle(qtbot, window)
    for _ in range(ANSWERS - 1):
        assert window.controller.regenerate()
        wait_idle(qtbot, window)
    label, emitter = QLabel(), Emitter()
    emitter.flag.connect(lambda value: None)
    for i in range(CALLS):
        label.setText(str(i))
        emitter.flag.emit(i % 2 == 0)
    [answer] = [m for m in window.controller.store.messages(window.controller.conversation_id) if m.role == "assistant"]
    assert answer.stats["generated_tokens"] == 4

    window.settings_panel.set_value("max_tokens", 1000)
    window.controller.send_message(LONG_PROMPT)
    wait_answering(qtbot, window)
    window.close()
    assert not window.controller.thread.isRunning()

    again = make_window(data)
    last = [m for m in again.controller.store.messages(again.controller.conversation_id) if m.role == "assistant"][-1]
    assert last.content and last.stats.get("stop_reason") == "cancel"


def test_quitting_while_the_models_load(make_window, gui_models, qtbot, tmp_path):
    data = tmp_path / "loading"
    for _ in range(3):
        window = make_window(data, main_model=str(gui_models.main), draft_model=str(gui_models.same))
        assert window.controller.loading
        window.close()
        assert not window.controller.thread.isRunning() and not window.controller.loading
    again = make_window(data)
    assert again.controller.settings.main_model == str(gui_models.main)

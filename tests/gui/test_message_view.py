"""Message widgets: copying, code blocks, token colouring."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtGui import QGuiApplication

from app.gui.message_view import ChatView

ANSWER = "Use this:\n\n```python\nprint('hi')\n```\n\nand this:\n\n```sh\nls -la\n```\n"


def test_copy_buttons_copy_the_message_and_each_code_block(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    widget = view.add_message(1, "assistant", ANSWER, {"generation_tps": 10.0, "generated_tokens": 5})
    widget.copy_button.click()
    assert QGuiApplication.clipboard().text() == ANSWER
    widget.body.anchorClicked.emit(QUrl("copy-code:1"))
    assert QGuiApplication.clipboard().text() == "ls -la"
    widget.body.anchorClicked.emit(QUrl("copy-code:0"))
    assert QGuiApplication.clipboard().text() == "print('hi')"
    assert widget.footer.text() == "10.0 tok/s · 5 tokens"


def test_colouring_needs_stored_pieces_and_can_be_turned_off(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    coloured = view.add_message(1, "assistant", "ab", runs=[("a", "draft"), ("b", "main")])
    plain = view.add_message(2, "assistant", "old answer without pieces")
    user = view.add_message(3, "user", "question", runs=[("question", "main")])
    view.set_colour_tokens(True)
    assert coloured.showing_origins() and not plain.showing_origins() and not user.showing_origins()
    assert "old answer without pieces" in plain.body.toPlainText()
    view.set_colour_tokens(False)
    assert not coloured.showing_origins() and coloured.body.toPlainText().strip() == "ab"


def test_compare_link_reports_its_message(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    widget = view.add_message(42, "assistant", "answer")
    with qtbot.waitSignal(view.compare_requested) as signal:
        widget.compare_button.click()
    assert signal.args == [42]
    assert not view.add_message(43, "user", "q").compare_button.isVisibleTo(view)

"""Edit, branch, versions and deletion in the window, as a user does them, and after a restart."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from tests.gui.conftest import send, wait_idle, wait_loaded


def shown(window) -> list[tuple[str, str]]:
    return [(w.role, w.text) for w in window.chat_view.messages()]


def test_editing_a_question_branches_and_versions_flip_with_their_own_numbers(make_window, gui_models, qtbot, tmp_path):
    data = tmp_path / "branches"
    window = make_window(data, main_model=str(gui_models.main), draft_model=str(gui_models.same), drafter="model")
    wait_loaded(qtbot, window)
    send(window, "hello")
    wait_idle(qtbot, window)
    question = window.chat_view.messages()[0]
    assert question.edit_button.isVisibleTo(window) and not question.versions.isVisibleTo(window)

    question.edit_button.click()
    assert question.editing and question.editor.box.toPlainText() == "hello"
    question.editor.box.setPlainText("write a story")
    qtbot.keyClick(question.editor.box, Qt.Key.Key_Return)   # Enter sends the edit, as in the message box
    wait_idle(qtbot, window)
    edited, answer = window.chat_view.messages()
    assert (edited.text, edited.versions.label.text()) == ("write a story", "2/2")
    assert answer.text and answer.role == "assistant"
    edited_answer_stats = window.controller.store.message(answer.message_id).stats

    edited.versions.previous.click()   # ‹: the first branch, with its own answer and numbers
    first_question, first_answer = window.chat_view.messages()
    assert (first_question.text, first_question.versions.label.text()) == ("hello", "1/2")
    assert first_answer.message_id != answer.message_id
    assert window.stats_panel.isVisibleTo(window)
    window.close()

    again = make_window(data)   # a restart: the branch shown and both versions are still there
    assert shown(again)[0] == ("user", "hello")
    again.chat_view.messages()[0].versions.next.click()
    assert shown(again)[0] == ("user", "write a story")
    assert again.controller.store.message(again.chat_view.messages()[1].message_id).stats == edited_answer_stats


def test_regenerated_versions_flip_and_a_deletion_asks_first_when_messages_follow(loaded_window, qtbot, monkeypatch):
    window = loaded_window
    send(window, "hello")
    wait_idle(qtbot, window)
    window.settings_panel.set_value("temperature", 1.0)
    window.chat_view.messages()[1].regenerate_button.click()
    wait_idle(qtbot, window)
    question, second = window.chat_view.messages()
    assert second.versions.label.text() == "2/2" and not second.versions.next.isEnabled()
    second.versions.previous.click()
    assert window.chat_view.messages()[1].versions.label.text() == "1/2"

    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda *args: asked.append(args[2]) or QMessageBox.StandardButton.No)
    window.chat_view.messages()[0].delete_button.click()
    assert asked == ["Delete this message and the one after it?"] and len(shown(window)) == 2   # said no
    window.chat_view.messages()[1].delete_button.click()   # nothing follows: no question
    assert len(asked) == 1
    assert shown(window)[1][0] == "assistant"   # the other version takes its place
    assert window.chat_view.messages()[1].versions.isHidden()


def test_message_actions_are_off_while_an_answer_is_written(loaded_window, qtbot):
    window = loaded_window
    send(window, "hello")
    question = window.chat_view.messages()[0]
    assert not question.edit_button.isEnabled() and not question.delete_button.isEnabled()
    wait_idle(qtbot, window)
    assert question.edit_button.isEnabled() and question.delete_button.isEnabled()


def test_escape_cancels_an_edit_and_keeps_the_message(loaded_window, qtbot):
    window = loaded_window
    send(window, "hello")
    wait_idle(qtbot, window)
    question = window.chat_view.messages()[0]
    question.edit_button.click()
    question.editor.box.setPlainText("something else")
    qtbot.keyClick(question.editor.box, Qt.Key.Key_Escape)
    assert not question.editing and question.text == "hello"
    assert window.controller.store.messages(window.controller.conversation_id)[0].versions == 1


def test_alt_left_and_right_flip_the_last_answers_versions_from_the_message_box(loaded_window, qtbot):
    from PySide6.QtTest import QTest

    window = loaded_window
    send(window, "hello")
    wait_idle(qtbot, window)
    window.settings_panel.set_value("temperature", 1.0)
    window.controller.regenerate()
    wait_idle(qtbot, window)
    box = window.composer.input
    box.setFocus()

    def press(key) -> str:
        window.activateWindow()   # shortcuts reach the active window only
        qtbot.waitUntil(window.isActiveWindow)
        QTest.keyClick(box, key, Qt.KeyboardModifier.AltModifier)
        return window.chat_view.messages()[-1].versions.label.text()

    assert press(Qt.Key.Key_Left) == "1/2"
    assert press(Qt.Key.Key_Left) == "1/2"   # nothing before the first
    assert press(Qt.Key.Key_Right) == "2/2"
    assert box.toPlainText() == ""
    listed = dict(window.shortcut_rows())
    assert "Alt+Left" in listed and "Alt+Right" in listed and "Ctrl+R" in listed

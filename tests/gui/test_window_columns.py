"""Issue 41, fault 4: the chat stays the widest column at any window size (at 1000x700 it was the narrowest:
the side panel kept 400 px and the conversation list 240 px); either panel can be hidden from the View menu
or its keys, and the window opens next time as it was left."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from app.gui.models.model_bar import STATUS_MIN_PX
from app.gui.widgets.columns import CHAT_LEAD, fit_columns
from tests.gui.conftest import wait_loaded

SIZES = [(1000, 700), (1280, 800), (1440, 900)]   # the window's minimum, a laptop, the size it opens at


def column_widths(window) -> tuple[int, int, int]:
    QApplication.processEvents()
    conversations, chat, side = window.columns.sizes()
    return conversations, chat, side


def shown_at(make_window, width: int, height: int):
    window = make_window()
    window.resize(width, height)
    QApplication.processEvents()
    assert (window.width(), window.height()) == (width, height)
    return window


@pytest.mark.parametrize("width,height", SIZES)
def test_the_chat_is_the_widest_column_at_every_size(make_window, width, height):
    conversations, chat, side = column_widths(shown_at(make_window, width, height))
    assert chat > side and chat > conversations, (conversations, chat, side)


def test_a_side_panel_dragged_wider_than_the_chat_gives_way(make_window):
    window = shown_at(make_window, 1280, 800)
    columns = window.columns
    columns.moveSplitter(300, 2)   # the side panel's handle dragged far left: the panel would be 960 px
    conversations, chat, side = column_widths(window)
    assert chat >= CHAT_LEAD * side - 1 and chat > conversations
    window.resize(1440, 900)
    assert column_widths(window)[2] == side, "the width it gave way to is the one it keeps"


def test_the_rule_shrinks_the_wider_side_first_and_keeps_minimums():
    assert fit_columns(1400, (240, 440), (175, 350), (True, True)) == (240, 720, 440)
    left, chat, right = fit_columns(990, (240, 440), (175, 300), (True, True))
    assert left == 240 and chat >= CHAT_LEAD * right and left + chat + right == 990
    assert fit_columns(990, (240, 440), (175, 350), (True, True)) == (240, 400, 350), "never below a minimum"
    assert fit_columns(990, (240, 440), (175, 350), (False, True)) == (0, 550, 440)
    assert fit_columns(990, (240, 440), (175, 350), (False, False)) == (0, 990, 0)


def test_both_panels_hide_from_the_view_menu_and_their_keys(make_window, qtbot):
    window = shown_at(make_window, 1000, 700)

    def press(key, modifiers) -> None:
        window.activateWindow()   # shortcuts reach the active window only
        qtbot.waitUntil(window.isActiveWindow)
        QTest.keyClick(window, key, modifiers)

    ctrl = Qt.KeyboardModifier.ControlModifier
    press(Qt.Key.Key_B, ctrl)
    assert window.conversation_list.isHidden() and not window.list_action.isChecked()
    press(Qt.Key.Key_B, ctrl | Qt.KeyboardModifier.ShiftModifier)
    assert not window.side_tabs.isVisible() and not window.side_action.isChecked()
    conversations, chat, side = column_widths(window)
    assert (conversations, side) == (0, 0) and chat >= window.width() - 20
    window.side_action.trigger()   # the menu entry does the same
    assert window.side_tabs.isVisible() and column_widths(window)[1] > column_widths(window)[2]
    listed = dict(window.shortcut_rows())
    assert listed["Ctrl+B"] == "View › Conversation list"
    assert listed["Ctrl+Shift+B"].startswith("View › Side panel")
    assert len(listed) == len(window.shortcut_rows()), "no two entries share keys"


def test_the_window_opens_with_the_columns_as_they_were_left(make_window):
    window = shown_at(make_window, 1440, 900)
    window.columns.moveSplitter(1440 - 360, 2)   # the side panel made narrower
    side = column_widths(window)[2]
    assert side < 440
    window.list_action.trigger()
    window.close()

    again = shown_at(make_window, 1440, 900)
    assert again.conversation_list.isHidden() and not again.list_action.isChecked()
    assert column_widths(again)[2] == side
    again.list_action.trigger()
    assert column_widths(again)[0] == 240, "the hidden list comes back as wide as it was"


def test_the_loaded_line_shows_at_the_windows_minimum_size(make_window, gui_models, qtbot):
    """At 1000x700 the model bar's pickers took all its width and "Loaded …" was squeezed to nothing: it keeps
    room for the start of what is loaded (its whole text in its tool tip)."""
    window = make_window(main_model=str(gui_models.main), draft_model=str(gui_models.same), drafter="model")
    wait_loaded(qtbot, window)
    window.resize(1000, 700)
    QApplication.processEvents()
    status = window.model_bar.status
    assert status.width() >= STATUS_MIN_PX and status.text().startswith("Loaded tiny"), (status.width(), status.text())

"""The conversation list on its own: long titles, search text."""

from __future__ import annotations

from app.gui.chat.conversation_list import ConversationList
from app.storage.conversations import Conversation

LONG_TITLE = "Write a short story about a fast fox and a very lazy dog"


def test_a_long_title_is_elided_not_scrolled_and_the_whole_title_is_its_tooltip(qtbot):
    titles = ConversationList()
    qtbot.addWidget(titles)
    titles.resize(240, 300)
    titles.show()
    titles.show_conversations([Conversation(1, LONG_TITLE, "", 0.0, 0.0)], 1)
    qtbot.wait(10)
    assert not titles.list.horizontalScrollBar().isVisible()
    assert titles.list.item(0).toolTip() == LONG_TITLE and titles.current_id() == 1


def test_search_text_is_read_and_set_through_the_list(qtbot):
    titles = ConversationList()
    qtbot.addWidget(titles)
    searched = []
    titles.search_changed.connect(searched.append)
    titles.set_search_text("alpha")
    assert titles.search_text() == "alpha" and searched == ["alpha"]

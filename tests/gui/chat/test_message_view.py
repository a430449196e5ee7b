"""Message widgets: copying, code blocks, token colouring."""

from __future__ import annotations

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QGuiApplication

from app.gui.chat.message_view import ChatView
from app.gui.chat.reasoning_fold import fold_title
from app.storage.conversations import StoredMessage

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


def test_a_long_code_line_and_footer_stay_inside_a_narrow_chat_column(qtbot):
    """Seen in the app at 1000 px wide with the speculation panel open: the footer's one line made
    the message wider than the chat column (its Copy button off screen, the footer cut) and a long
    code line was cut at the column's edge. Both wrap now."""
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(300, 600)
    view.show()
    code = "```python\nitems[name] = items[name] + quantity  # a line far longer than the column is wide\n```"
    widget = view.add_message(1, "assistant", code, {"generated_tokens": 137, "generation_tps": 52.9,
                                                     "drafted": 126, "accepted": 111}, versions=(2, 3))
    qtbot.waitUntil(lambda: widget.body.document().size().height() > 0)
    column = view.viewport().width()
    assert widget.width() <= column
    for button in (widget.copy_button, widget.delete_button, widget.versions.next):   # with ‹ 2/3 › and its actions
        assert button.isVisibleTo(view) and button.mapTo(view.viewport(), button.rect().topRight()).x() <= column
    assert widget.body.document().idealWidth() <= widget.body.viewport().width()
    assert "accepted 111 (88%)" in widget.footer.text()


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


def _png(path):
    from PySide6.QtGui import QImage

    image = QImage(4, 4, QImage.Format.Format_RGB32)
    image.fill(0xff0000)
    assert image.save(str(path))
    return path


def test_an_image_in_model_text_is_a_link_and_no_file_is_read(qtbot, tmp_path):
    from PySide6.QtGui import QTextDocument

    picture = _png(tmp_path / "picture.png")
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    # the report's ![z](/dev/zero) read memory until the process died; a real picture shows it safely
    text = f"Look: ![a red square]({picture}) and ![]({picture}) then ![z]({tmp_path}/elsewhere.png)"
    widget = view.add_message(1, "assistant", text)
    qtbot.waitExposed(view)
    shown = widget.body.toPlainText()
    assert shown.startswith("Look: a red square and") and shown.rstrip().endswith("then z")
    assert "<img" not in widget.body.toHtml() and f'href="{tmp_path}/elsewhere.png"' in widget.body.toHtml()
    # even HTML that names the file directly gets a blank pixel, never the file's pixels
    widget.body.setHtml(f'<img src="{picture}"><img src="{QUrl.fromLocalFile(str(picture)).toString()}">')
    for url in (QUrl(str(picture)), QUrl.fromLocalFile(str(picture))):
        image = widget.body.document().resource(QTextDocument.ResourceType.ImageResource, url)
        assert image.width() == 1 and image.pixelColor(0, 0).alpha() == 0


def test_raw_html_in_model_text_is_shown_as_text(qtbot, tmp_path):
    picture = _png(tmp_path / "picture.png")
    view = ChatView()
    qtbot.addWidget(view)
    text = f'before <img src="{picture}"> <b>bold</b> <link rel="stylesheet" href="{picture}"> after'
    widget = view.add_message(1, "assistant", text)
    shown = widget.body.toPlainText()
    assert f'<img src="{picture}">' in shown and "<b>bold</b>" in shown and shown.rstrip().endswith("after")


def test_copy_code_links_written_by_the_model_do_nothing(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    widget = view.add_message(1, "assistant", "[click](copy-code:abc) [neg](copy-code:-1)\n\n```sh\nls\n```\n")
    QGuiApplication.clipboard().setText("unchanged")
    for link in ("copy-code:abc", "copy-code:-1", "copy-code:", "copy-code:99999999999999999999", "copy-code:7"):
        widget.body.anchorClicked.emit(QUrl(link))
        assert QGuiApplication.clipboard().text() == "unchanged"
    widget.body.anchorClicked.emit(QUrl("copy-code:0"))
    assert QGuiApplication.clipboard().text() == "ls"


def test_reasoning_is_folded_above_the_answer_and_opens_on_a_click(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(600, 800)
    view.show()
    widget = view.add_message(1, "assistant", "The answer.", {"generated_tokens": 9, "thinking_s": 12.4},
                              reasoning="First I *consider* the question.")
    fold = widget.reasoning
    assert not fold.isHidden() and fold.button.text() == "▸ Thought for 12 s"
    assert fold.body.isHidden() and fold.body.toPlainText() == ""   # closed: not even rendered
    qtbot.mouseClick(fold.button, Qt.MouseButton.LeftButton)
    assert fold.opened and fold.button.text() == "▾ Thought for 12 s"
    assert not fold.body.isHidden() and fold.body.toPlainText().strip() == "First I consider the question."
    assert widget.body.toPlainText().strip() == "The answer."
    widget.copy_button.click()
    assert QGuiApplication.clipboard().text() == "The answer."   # the answer, without the reasoning
    qtbot.mouseClick(fold.button, Qt.MouseButton.LeftButton)
    assert not fold.opened and fold.body.isHidden()
    plain = view.add_message(2, "assistant", "No reasoning.")
    assert plain.reasoning.isHidden()


def test_while_the_model_thinks_the_fold_says_so_and_the_answer_follows(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.show()
    widget = view.start_answer(7)
    view.update_answer(7, "", [], "Hmm", 0.4, thinking=True)
    assert widget.reasoning.button.text() == "▸ Thinking…"
    assert widget.body.isHidden()   # no "…" below the fold while only reasoning streams
    widget.reasoning.set_open(True)
    view.update_answer(7, "", [], "Hmm, the user", 2.0, thinking=True)
    assert widget.reasoning.body.toPlainText().strip() == "Hmm, the user"   # open: it streams in
    view.update_answer(7, "Hi", [["Hi", "main"]], "Hmm, the user", 2.5, thinking=False)
    assert widget.reasoning.button.text() == "▾ Thought for 2.5 s" and not widget.body.isHidden()
    view.finish_answer(StoredMessage(7, 1, "assistant", "Hi!", {"generated_tokens": 3, "thinking_s": 0.3},
                                     reasoning="Hmm, the user greets."))
    assert widget.reasoning.button.text() == "▾ Thought for less than a second"
    assert widget.reasoning.body.toPlainText().strip() == "Hmm, the user greets."


def test_fold_titles():
    assert fold_title(True, 3.0, False) == "▸ Thinking…"
    assert fold_title(False, 104.6, True) == "▾ Thought for 105 s"
    assert fold_title(False, 9.94, False) == "▸ Thought for 9.9 s"
    assert fold_title(False, None, False) == "▸ Reasoning"


def test_an_answer_keeps_its_single_line_breaks(qtbot):
    """"Count from 1 to 5, one number per line" is shown one number per line, as chat apps show it
    (Markdown alone joins such lines into one paragraph: "1 2 3 4 5")."""
    view = ChatView()
    qtbot.addWidget(view)
    widget = view.add_message(1, "assistant", "Here:\n1\n2\n3\n4\n5\n\n- Apple\n- Banana\n\n**Done**\nbye")
    shown = widget.body.toPlainText().splitlines()
    assert shown[:6] == ["Here:", "1", "2", "3", "4", "5"]
    assert "Apple" in shown[6] and "Banana" in shown[7]          # a list stays a list
    assert shown[-2:] == ["Done", "bye"]                          # emphasis still rendered, the break kept
    table = view.add_message(3, "assistant", "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |")
    assert table.body.document().toHtml().count("<tr") == 3                # a table stays a table
    code = view.add_message(2, "assistant", "```python\ndef f():\n    return 1\n```")
    assert code.body.toPlainText().splitlines()[-2:] == ["def f():", "    return 1"]   # code blocks as before


def test_a_users_message_is_shown_as_typed(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    typed = "line one\nline two\n\n  indented *not emphasis* <b>x</b>\n# not a heading"
    widget = view.add_message(1, "user", typed)
    assert widget.body.toPlainText() == typed


def test_a_streaming_answer_says_how_far_the_prompt_is_read_until_its_first_token(qtbot):
    """Issue 41, fault 5: after a conversation switch the whole history is read again, and the answer
    showed only "generating…" for over a minute. Its footer now counts the tokens read and their speed."""
    from app.core.speculation.events import Origin, Reading, Started, TokenPiece
    from app.gui.runtime.live_stats import LiveStats

    view = ChatView()
    qtbot.addWidget(view)
    widget = view.start_answer(7)
    live = LiveStats()
    live.add(Started(2000, 0))
    assert live.status_line() == "generating…"
    live.add(Reading(1024, 2000, at_s=3.2))
    view.update_answer(7, live.text, live.runs, status=live.status_line())
    assert widget.footer.text() == "reading the conversation: 1,024 of 2,000 tokens (320 tokens/s)"
    live.add(Reading(2000, 2000, at_s=6.4))
    live.add(TokenPiece("Hello", (5,), Origin.MAIN, at_s=6.5))
    view.update_answer(7, live.text, live.runs, status=live.status_line())
    assert widget.footer.text() == "generating…" and widget.text == "Hello"

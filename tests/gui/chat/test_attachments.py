"""Issue 41, item 9: text files attached to a message (a button, or dropped on the message box) go into
the message under their names in fenced blocks, survive as the message's text, and a file that cannot be
attached is refused with the reason, losing nothing already attached or typed."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.gui.chat.attachments import MAX_ATTACHMENT_BYTES, Attachment, message_with
from app.gui.chat.composer import Composer


def _composer(qtbot) -> tuple[Composer, list, list]:
    composer = Composer()
    qtbot.addWidget(composer)
    sent, failed = [], []
    composer.send_requested.connect(sent.append)
    composer.attach_failed.connect(failed.append)
    return composer, sent, failed


def test_attached_files_are_sent_under_their_names_in_fences_a_file_cannot_close(qtbot, tmp_path):
    code = tmp_path / "tool.py"
    code.write_text("def f():\n    return '```'\n", encoding="utf-8")
    log = tmp_path / "run.log"
    log.write_text("line 1\nline 2\n", encoding="utf-8")
    composer, sent, failed = _composer(qtbot)
    composer.attach([str(code), str(log)])
    composer.input.setPlainText("Rename f to g")
    composer.submit()
    assert not failed and sent == ["Rename f to g\n\ntool.py:\n````python\ndef f():\n    return '```'\n````"
                                   "\n\nrun.log:\n```\nline 1\nline 2\n```"]
    assert composer.attachments.isVisibleTo(composer)
    composer.clear_input()   # the window clears the box once the message is sent
    assert composer.attachments.attachments == [] and not composer.attachments.isVisibleTo(composer)


def test_a_message_of_attachments_alone_can_be_sent(qtbot, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# Plan\n", encoding="utf-8")
    composer, sent, _ = _composer(qtbot)
    composer.attach([str(notes)])
    composer.submit()
    assert sent == ["notes.md:\n```markdown\n# Plan\n```"]


def test_files_that_are_not_text_or_too_large_are_refused_saying_why(qtbot, tmp_path):
    binary = tmp_path / "image.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    big = tmp_path / "big.txt"
    big.write_text("x" * (MAX_ATTACHMENT_BYTES + 1), encoding="utf-8")
    good = tmp_path / "ok.txt"
    good.write_text("fine", encoding="utf-8")
    composer, _, failed = _composer(qtbot)
    composer.input.setPlainText("kept")
    composer.attach([str(good), str(binary), str(big), str(tmp_path / "gone.txt")])
    assert failed[0] == "image.png is not a text file (it is not UTF-8)."
    assert failed[1] == "big.txt is 524,289 bytes; a message takes files of up to 512 KiB (524,288 bytes)."
    assert failed[2].startswith("gone.txt could not be read")
    assert [a.name for a in composer.attachments.attachments] == ["ok.txt"]
    assert composer.input.toPlainText() == "kept"


def test_files_dropped_on_the_message_box_are_attached_not_pasted(qtbot, tmp_path):
    dropped = tmp_path / "dropped.txt"
    dropped.write_text("hello", encoding="utf-8")
    composer, _, _ = _composer(qtbot)
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(dropped))])
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, data, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(composer.input.viewport(), enter)
    assert enter.isAccepted()   # the box takes the files
    # Qt delivers a drop only inside a drag it runs itself: the drop goes to the filter as Qt would pass it
    drop = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, data, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    assert composer.eventFilter(composer.input.viewport(), drop) and drop.isAccepted()
    assert [a.name for a in composer.attachments.attachments] == ["dropped.txt"]
    assert composer.input.toPlainText() == ""


def test_removing_an_attachment_leaves_the_others(qtbot):
    from PySide6.QtWidgets import QPushButton

    composer, sent, _ = _composer(qtbot)
    composer.attachments.add(Attachment("a.txt", "A"))
    composer.attachments.add(Attachment("b.txt", "B"))
    remove_a = next(b for b in composer.attachments.findChildren(QPushButton) if b.toolTip() == "Remove a.txt")
    remove_a.click()
    composer.submit()
    assert sent == [message_with("", [Attachment("b.txt", "B")])] == ["b.txt:\n```\nB\n```"]

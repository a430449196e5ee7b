"""Edit, regenerate, versions and deletion through the ChatController, with tiny models."""

from __future__ import annotations

from app.gui.runtime.branching import BUSY
from tests.gui.runtime.test_controller import LONG_PROMPT, answers, loaded, make, wait_idle  # noqa: F401 (fixtures)


def contents(c) -> list[tuple[str, str, int, int]]:
    return [(m.role, m.content, m.version, m.versions) for m in c.store.messages(c.conversation_id)]


def test_an_edited_question_is_answered_on_a_new_branch_and_the_old_one_stays(loaded, qtbot):
    c, seen = loaded()
    c.send_message("hello")
    wait_idle(qtbot, c)
    first_question, first_answer = c.store.messages(c.conversation_id)
    assert c.branches.edit(first_question.id, "  hello again  ")
    wait_idle(qtbot, c)
    question, answer = c.store.messages(c.conversation_id)
    assert (question.content, question.version, question.versions) == ("hello again", 2, 2)
    assert answer.id != first_answer.id and answer.content and answer.parent_id == question.id
    assert seen("messages_cut") == [(first_question.id,)]
    assert seen("message_added")[-1] == (c.store.message(question.id),)
    assert c.prompt_messages(c.conversation_id, upto_id=answer.id)[-1] == {"role": "user", "content": "hello again"}

    assert c.branches.flip(question.id, -1)   # the first branch, its answer with it
    assert [m.id for m in c.store.messages(c.conversation_id)] == [first_question.id, first_answer.id]
    assert seen("conversation_shown")[-1][0].messages == tuple(c.store.messages(c.conversation_id))
    assert not c.branches.flip(first_question.id, -1)


def test_an_empty_edit_is_refused_and_nothing_is_saved(loaded, qtbot):
    c, seen = loaded()
    c.send_message("hello")
    wait_idle(qtbot, c)
    question = c.store.messages(c.conversation_id)[0]
    assert not c.branches.edit(question.id, "   ")
    assert "cannot be empty" in seen.notices("error")[-1]
    assert [m.versions for m in c.store.messages(c.conversation_id)] == [1, 1]


def test_an_earlier_answer_regenerated_branches_there(loaded, qtbot):
    c, _ = loaded()
    c.send_message("one")
    wait_idle(qtbot, c)
    c.send_message("two")
    wait_idle(qtbot, c)
    _, first_answer, _, _ = c.store.messages(c.conversation_id)
    assert c.regenerate(first_answer.id)
    wait_idle(qtbot, c)
    assert [(r, v, n) for r, _, v, n in contents(c)] == [("user", 1, 1), ("assistant", 2, 2)]
    assert c.branches.flip(c.store.messages(c.conversation_id)[1].id, -1)
    assert [m.content for m in c.store.messages(c.conversation_id)][2] == "two"   # the old branch went on


def test_delete_takes_what_follows_and_nothing_changes_while_answering(loaded, qtbot):
    c, seen = loaded(max_tokens=1000)
    c.send_message("hello")
    wait_idle(qtbot, c)
    question = c.store.messages(c.conversation_id)[0]
    assert c.branches.following(question.id) == 1
    c.send_message(LONG_PROMPT)
    assert not c.branches.delete(question.id) and seen.notices("error")[-1] == BUSY
    assert not c.branches.flip(question.id, 1)
    c.stop()
    wait_idle(qtbot, c)
    # the long question (with what was written of its answer before the stop, if anything) goes
    assert c.branches.delete(c.store.messages(c.conversation_id)[2].id)
    assert [m.role for m in c.store.messages(c.conversation_id)] == ["user", "assistant"]
    assert c.branches.delete(question.id) and c.store.messages(c.conversation_id) == []
    assert seen("conversation_shown")[-1][0].messages == ()


def test_a_new_version_that_fails_before_any_text_gives_its_place_back_to_the_one_before(loaded, qtbot, monkeypatch):
    from app.core.errors import QuickdraftError
    from app.gui.runtime.worker import EngineWorker

    c, seen = loaded()
    c.send_message("hello")
    wait_idle(qtbot, c)
    question, first = c.store.messages(c.conversation_id)

    def fail(self, engine, request):
        raise QuickdraftError("the engine failed")

    monkeypatch.setattr(EngineWorker, "_stream", fail)
    assert c.regenerate()
    wait_idle(qtbot, c)
    assert [m.id for m in c.store.messages(c.conversation_id)] == [question.id, first.id]
    assert c.store.messages(c.conversation_id)[1].versions == 1   # the failed version is gone
    shown = seen("conversation_shown")[-1][0]
    assert [m.id for m in shown.messages] == [question.id, first.id]   # the view shows the first answer again
    assert seen.notices("error")[-1] == "the engine failed"

"""Edit, regenerate, versions and deletion for the ChatController: the conversation as a tree.

An edited question is a new version of it, following the same message, and is answered at once: a
branch. A regenerated answer is a new version of that answer; the earlier ones stay, each with its
own numbers, to flip between (the store keeps which is shown: app/storage/branches.py). Deleting a
message takes what follows it. None of this may happen while an answer is written: the answer
belongs to the path shown when it started.
"""

from __future__ import annotations

from app.gui.runtime.chat_values import ShownConversation
from app.storage.conversations import StoredMessage

BUSY = "Wait for the answer to finish (or stop it) before changing the conversation."


class Branching:
    """Works through the ChatController that holds it (its store, signals and answer start); not typed
    as one: the controller imports this module."""

    def __init__(self, controller):
        self.c = controller

    def regenerate(self, message_id: int | None = None) -> bool:
        """Answer again: a new version of the answer ``message_id`` (by default the last one), or an
        answer to a last question that has none. What followed the answer stays on its version."""
        c = self.c
        if c.conversation_id is None or not c.ready_to_generate():
            return False
        path = c.store.messages(c.conversation_id)
        target = _find(path, message_id) if message_id is not None else (path[-1] if path else None)
        if target is None:
            return False
        if target.role != "assistant":   # a question with no answer yet: answer it
            return target is path[-1] and c.start_answer()
        c.messages_cut.emit(target.id)
        return c.start_answer(upto_id=target.id, parent_id=target.parent_id)

    def edit(self, message_id: int, text: str) -> bool:
        """Send ``text`` in place of the question ``message_id``, as a new version of it (a branch), and
        answer it. False, with the reason in a notice, when it cannot start; nothing is saved then."""
        c = self.c
        text = text.strip()
        target = c.store.message(message_id)
        if target is None or target.role != "user" or target.conversation_id != c.conversation_id:
            return False
        if not text:
            c.notice.emit("An edited message cannot be empty: delete it instead.", "error")
            return False
        if not c.ready_to_generate():
            return False
        c.messages_cut.emit(target.id)
        c.message_added.emit(c.store.add_message(target.conversation_id, "user", text, parent_id=target.parent_id))
        return c.start_answer()

    def flip(self, message_id: int, step: int) -> bool:
        """Show the version ``step`` places from ``message_id`` (‹ -1, › +1) and the path after it."""
        if not self._may_change():
            return False
        if self.c.store.switch_version(message_id, step) is None:
            return False
        self._show_again()
        return True

    def flip_last(self, step: int) -> bool:
        """‹ or › on the last answer shown (the one Regenerate makes versions of): the keyboard's way."""
        path = self.c.store.messages(self.c.conversation_id) if self.c.conversation_id is not None else []
        answers = [m for m in path if m.role == "assistant"]
        return bool(answers) and self.flip(answers[-1].id, step)

    def delete(self, message_id: int) -> bool:
        """Delete a message and what follows it (on every branch)."""
        if not self._may_change() or not self.c.store.delete_message(message_id):
            return False
        self._show_again()
        return True

    def answer_removed(self, message_id: int) -> None:
        """An answer that ended with no text was deleted: where it was a new version, the version
        before it is shown again in its place (with what followed it)."""
        self.c.message_removed.emit(message_id)
        path = self.c.store.messages(self.c.conversation_id) if self.c.conversation_id else []
        if path and path[-1].role == "assistant":
            self._show_again()

    def following(self, message_id: int) -> int:
        """How many messages the shown path has after ``message_id`` (what a deletion takes with it)."""
        ids = [m.id for m in self.c.store.messages(self.c.conversation_id)] if self.c.conversation_id else []
        return len(ids) - ids.index(message_id) - 1 if message_id in ids else 0

    def _may_change(self) -> bool:
        if self.c.is_generating:
            self.c.notice.emit(BUSY, "error")
            return False
        return self.c.conversation_id is not None

    def _show_again(self) -> None:
        c = self.c
        conv = c.store.get(c.conversation_id)
        c.conversation_shown.emit(ShownConversation(conv.id, conv.system_prompt,
                                                    tuple(c.store.messages(conv.id)), conv.thinking))


def _find(path: list[StoredMessage], message_id: int) -> StoredMessage | None:
    return next((m for m in path if m.id == message_id), None)

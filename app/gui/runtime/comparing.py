"""Compare for the ChatController: the answer shown, again greedily with the drafter chosen and with
the main model alone; its progress (which run, how far) replaces the line above the chat as it goes,
and the measured speedup joins the answer's numbers."""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.core.compare import CompareProgress, CompareResult
from app.core.params import DrafterKind
from app.gui.runtime.chat_values import ActiveGeneration, answer_request, compare_notice, with_compare

DRAFTING_OFF = ("Drafting is off: choose who drafts in the bar above to compare speculative decoding with the "
                "main model alone.")
STARTING = "Comparing (greedy): the main model alone, then with the drafter…"


class Comparing(QObject):
    """Works through the ChatController that holds it; not typed as one: the controller imports this.
    A QObject of the GUI thread, so that the worker's signals reach its methods there (queued), not on
    the engine's thread."""

    def __init__(self, controller):
        super().__init__(controller)
        self.c = controller
        self.line = ""   # the progress line shown: a newer one replaces it only while it is still shown

    def start(self, message_id: int) -> bool:
        c = self.c
        if not c.ready_to_generate():
            return False
        if c.drafter() is DrafterKind.NONE:
            c.notice.emit(DRAFTING_OFF, "error")
            return False
        stored = c.store.message(message_id)
        if stored is None or stored.role != "assistant":
            return False
        history = c.prompt_messages(stored.conversation_id, upto_id=message_id)
        _, request = answer_request(c.settings, c.loaded, history, c.store.get(stored.conversation_id).thinking)
        c.last_compare = None
        c.begin(ActiveGeneration(request, stored.conversation_id, message_id, compare=True))
        self.line = STARTING
        c.notice.emit(STARTING, "info")
        return True

    def progress(self, progress: CompareProgress) -> None:
        if self.c.is_comparing:
            line = progress.describe()
            self.c.notice_replaced.emit(self.line, line)
            self.line = line

    def done(self, result: CompareResult) -> None:
        c = self.c
        c.last_compare = result
        stored = c.store.message(c.active.message_id) if c.active is not None else None
        if stored is None:
            return
        c.store.update_message(stored.id, stored.content, with_compare(stored.stats, result))
        c.message_updated.emit(c.store.message(stored.id))
        c.notice.emit(compare_notice(result, (stored.stats or {}).get("estimated_speedup")), "info")

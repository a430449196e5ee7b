"""The chat with no widgets: conversations, the prompt, the generation lifecycle, models and settings.

The main window shows what this object signals and calls its methods; the tests drive it alone.
Requests go to the EngineWorker on its own thread by queued signals. What comes back is buffered
in a LiveStats and reaches the views on a timer (REPAINT_MS), never once per token.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, Qt, QThread, QTimer, Signal

from app.core.compare import CompareResult
from app.core.errors import QuickdraftError
from app.core.frontdoor import LoadedPair
from app.core.params import DrafterKind, StatesConfig
from app.core.speculation.events import Summary
from app.gui.runtime.branching import Branching
from app.gui.runtime.comparing import Comparing
from app.gui.runtime.chat_values import (NEW_TITLE, ActiveGeneration, ShownConversation, answer_parts, answer_request,
                                         feed, generation_problem, keep_partial, prompt_messages,
                                         save_partial, settings_after_load, title_from, who_drafts)
from app.gui.runtime.live_stats import LiveStats, message_stats
from app.gui.runtime.worker import Batch, EngineWorker, LoadFailure, LoadRequest, RemoteRequest, Started
from app.paths import AppPaths
from app.storage.conversations import LEAF, ConversationStore
from app.storage.opening import open_storage
from app.storage.settings import Settings, SettingsStore

REPAINT_MS = 150          # ~7 Hz: counters, charts and the streaming message
BUSY_WITH_MODELS = "Wait for the current answer or load to finish before changing models."


class ChatController(QObject):
    conversations_changed = Signal(object, object)  # [Conversation] matching the search, the current id or None
    conversation_shown = Signal(object)           # ShownConversation: show these messages and this prompt
    message_added = Signal(object)                # StoredMessage: the user's message, saved
    message_removed = Signal(int)                 # message id (an empty partial answer)
    messages_cut = Signal(int)                    # message id: no longer shown, nor what follows it (a new version)
    message_updated = Signal(object)              # StoredMessage whose stats changed (a compare)
    answer_started = Signal(int)                  # the assistant message id that is about to stream
    answer_updated = Signal(int, object)          # message id, LiveStats: on the repaint timer only
    answer_finished = Signal(object)              # StoredMessage: the answer as saved, whole or partial
    generating_changed = Signal(bool)
    busy_changed = Signal(bool)                   # generating or loading: nothing else may start
    notice = Signal(str, str)                     # text, kind: "error", "warning" or "info"
    notice_cleared = Signal(str)                  # clear the notice shown if it is of this kind
    notice_withdrawn = Signal(str)                # clear this notice if it is still shown (no longer true)
    notice_replaced = Signal(str, str)            # old, new: a progress line moves on, if still shown
    model_loading = Signal(str)                   # the main model's file name
    models_loaded = Signal(object)                # LoadedPair: after a load, or again when a failed one kept it
    models_unloaded = Signal()
    colour_tokens_changed = Signal(bool)

    _load = Signal(object)          # LoadRequest, to the worker
    _connect_remote = Signal(object)  # RemoteRequest, to the worker
    _generate = Signal(object)      # GenerationRequest, to the worker
    _compare = Signal(object)       # GenerationRequest, to the worker: compared with the main model alone
    _finish = Signal()              # to the worker: free the models and end the thread

    def __init__(self, paths: AppPaths, settings_store: SettingsStore | None = None,
                 conversations: ConversationStore | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.paths = paths
        storage = open_storage(paths, settings_store, conversations)
        self.settings_store = storage.settings_store
        self.settings: Settings = storage.settings
        self.store = storage.conversations
        self.problems = storage.problems   # what opening the files took, for the first notice
        self.conversation_id: int | None = None
        self.search = ""
        self.loaded: LoadedPair | None = None
        self.loading = False
        self._load_cancel = threading.Event()   # the load under way's (LoadRequest.cancel)
        self.models_installed = True   # the window says when nothing is (what to do first differs)
        self._load_warning = ""        # the last load's warning, withdrawn by the next load
        self.active: ActiveGeneration | None = None
        self.last_generation: ActiveGeneration | None = None
        self.last_compare: CompareResult | None = None
        self.closed = False
        self._remote_key = ""      # the API key of the server being connected to
        self._new_chat_prompt = self.settings.default_system_prompt
        self._new_chat_thinking = True
        self._repaint_timer = QTimer(self)
        self._repaint_timer.setInterval(REPAINT_MS)
        self._repaint_timer.timeout.connect(self._emit_progress)
        self.branches = Branching(self)   # edit, regenerate, versions, delete
        self.comparing = Comparing(self)
        self._start_worker()

    def _start_worker(self) -> None:
        self.thread = QThread(self)
        self.thread.setObjectName("engine-worker")
        self.worker = EngineWorker(self.paths.profiles_dir)
        self.worker.moveToThread(self.thread)
        self._load.connect(self.worker.load, Qt.ConnectionType.QueuedConnection)
        self._connect_remote.connect(self.worker.connect_remote, Qt.ConnectionType.QueuedConnection)
        self._generate.connect(self.worker.generate, Qt.ConnectionType.QueuedConnection)
        self._compare.connect(self.worker.compare, Qt.ConnectionType.QueuedConnection)
        self._finish.connect(self.worker.finish, Qt.ConnectionType.QueuedConnection)
        self.worker.loaded.connect(self._on_loaded)
        self.worker.load_failed.connect(self._on_load_failed)
        self.worker.started.connect(self._on_started)
        self.worker.batch.connect(self._on_batch)
        self.worker.finished.connect(self._on_finished)
        self.worker.compared.connect(self.comparing.done)
        self.worker.compare_progress.connect(self.comparing.progress)
        self.worker.failed.connect(self._on_failed)
        self.worker.idle.connect(self._on_idle)
        self.thread.start()

    def start(self) -> None:
        """Signal the state the app opened with, once the views are connected."""
        self.colour_tokens_changed.emit(self.settings.colour_tokens)
        conversations = self.store.conversations()
        if conversations:
            self.select_conversation(conversations[0].id)
        else:
            self._show_no_conversation()
        if self.problems:
            self.notice.emit("\n".join(self.problems), "warning")

    # --- state ---------------------------------------------------------------------------------

    @property
    def is_generating(self) -> bool:
        return self.active is not None

    @property
    def is_comparing(self) -> bool:
        return self.active is not None and self.active.compare

    @property
    def is_busy(self) -> bool:
        return self.active is not None or self.loading

    # --- conversations -------------------------------------------------------------------------

    def new_conversation(self, system_prompt: str | None = None) -> int:
        prompt = self.settings.default_system_prompt if system_prompt is None else system_prompt
        conv = self.store.create(NEW_TITLE, prompt)
        if not self._new_chat_thinking:
            self.store.set_thinking(conv.id, False)
        self.select_conversation(conv.id)
        return conv.id

    def select_conversation(self, conversation_id: int) -> bool:
        """Show a conversation; refused while answering (the answer belongs to the one shown)."""
        conv = self.store.get(conversation_id)
        if self.is_generating or conv is None:
            return False
        self.conversation_id = conversation_id
        self.conversation_shown.emit(ShownConversation(conv.id, conv.system_prompt,
                                                       tuple(self.store.messages(conv.id)), conv.thinking))
        self._refresh_list()
        return True

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename(conversation_id, title.strip() or "Untitled")
        self._refresh_list()

    def delete_conversation(self, conversation_id: int) -> bool:
        if self.active is not None and self.active.conversation_id == conversation_id:
            self.notice.emit("Stop the answer before deleting its conversation.", "error")
            return False
        self.store.delete(conversation_id)
        if conversation_id == self.conversation_id:
            remaining = self.store.conversations()
            if remaining:
                return self.select_conversation(remaining[0].id)
            self._show_no_conversation()
        self._refresh_list()
        return True

    def set_search(self, text: str) -> None:
        self.search = text.strip()
        self._refresh_list()

    def set_system_prompt(self, text: str) -> None:
        """The shown conversation's system prompt; with none yet, the prompt the first message uses."""
        if self.conversation_id is None:
            self._new_chat_prompt = text
        else:
            self.store.set_system_prompt(self.conversation_id, text)

    def set_thinking(self, on: bool) -> None:
        """The shown conversation's "Think" switch (the first message's, with none yet)."""
        if self.conversation_id is None:
            self._new_chat_thinking = on
        else:
            self.store.set_thinking(self.conversation_id, on)

    def prompt_messages(self, conversation_id: int, upto_id: int | None = None) -> list[dict]:
        """What the model is sent for this conversation (up to, not including, ``upto_id``)."""
        return prompt_messages(self.store, conversation_id, upto_id)

    def _show_no_conversation(self) -> None:
        self.conversation_id = None
        self._new_chat_prompt = self.settings.default_system_prompt
        self.conversation_shown.emit(ShownConversation(None, self._new_chat_prompt, (), self._new_chat_thinking))

    def _refresh_list(self) -> None:
        self.conversations_changed.emit(self.store.conversations(self.search), self.conversation_id)

    # --- generation ----------------------------------------------------------------------------

    def send_message(self, text: str) -> bool:
        """Save ``text`` as the user's message and start answering it. False when it cannot start
        (the reason is in a notice; nothing is saved)."""
        text = text.strip()
        if not text or not self.ready_to_generate():
            return False
        if self.conversation_id is None:
            self.new_conversation(self._new_chat_prompt)
        conv = self.store.get(self.conversation_id)
        if conv.title == NEW_TITLE and not self.store.messages(conv.id):
            self.store.rename(conv.id, title_from(text))
        self.message_added.emit(self.store.add_message(conv.id, "user", text))
        self._refresh_list()
        return self.start_answer()

    def stop(self) -> None:
        if self.active is not None:
            self.active.request.cancel.set()

    def regenerate(self, message_id: int | None = None) -> bool:
        """A new version of the last answer (or of ``message_id``), the earlier kept (branching.py)."""
        return self.branches.regenerate(message_id)

    def compare(self, message_id: int) -> bool:
        """Answer again greedily with the drafter chosen and with the main model alone: the shown answer's
        stats gain the measured speedup and whether both outputs are identical (its charts stay)."""
        return self.comparing.start(message_id)

    def ready_to_generate(self) -> bool:
        if self.is_generating:
            return False
        problem = generation_problem(self.settings, self.loading, self.loaded, self.models_installed)
        if problem:
            self.notice.emit(problem, "error")
        return not problem

    def drafter(self) -> DrafterKind:
        """Who drafts, given what is loaded."""
        return who_drafts(self.settings, self.loaded)

    def start_answer(self, upto_id: int | None = None, parent_id: int | None = LEAF) -> bool:
        """Answer the shown path (up to, not including, ``upto_id``) with a new message after ``parent_id``
        (by default the path's last)."""
        # the request first: if it cannot be made, no empty answer is saved or left "generating…"
        thinking, request = answer_request(self.settings, self.loaded, self.prompt_messages(self.conversation_id, upto_id),
                                           self.store.get(self.conversation_id).thinking)
        message = self.store.add_message(self.conversation_id, "assistant", "", parent_id=parent_id)
        self.answer_started.emit(message.id)
        self.begin(ActiveGeneration(request, self.conversation_id, message.id, live=LiveStats(thinking=thinking)))
        return True

    def begin(self, active: ActiveGeneration) -> None:
        self.active = active
        for kind in ("error", "info"):   # the last failure and the last result (or choice) are over
            self.notice_cleared.emit(kind)
        self.generating_changed.emit(True)
        self.busy_changed.emit(True)
        self._repaint_timer.start()
        (self._compare if active.compare else self._generate).emit(active.request)

    def _on_started(self, started: Started) -> None:
        if self.active is not None:
            self.active.live.add(started)
            self.active.started_at = started.monotonic_start

    def _on_batch(self, batch: Batch) -> None:
        if self.active is not None and not self.active.compare:
            feed(self.active.live, batch)

    def _on_finished(self, summary: Summary) -> None:
        active = self.active
        if active is None:
            return
        active.live.add(summary)
        loaded = self.loaded
        stats = message_stats(summary, active.request.drafter, loaded.main_name if loaded else "",
                              loaded.draft_name if loaded else None, active.live.thinking_s)
        answer, reasoning = answer_parts(active.live, summary)
        self.store.update_message(active.message_id, answer, stats, active.runs, reasoning=reasoning)
        if summary.error:
            self.notice.emit(summary.error, "error")
        elif summary.warnings:
            self.notice.emit("; ".join(summary.warnings), "warning")

    def _on_failed(self, message: str) -> None:
        self._save_partial()
        self.notice.emit(message, "error")

    def _on_idle(self) -> None:
        active = self.active
        if active is None:
            return
        if active.compare and self.last_compare is None:
            self.notice_cleared.emit("info")   # the "Comparing…" line of a compare that was stopped
        self._emit_progress()                   # the final numbers
        self._repaint_timer.stop()
        self.last_generation, self.active = active, None
        if not active.compare:
            stored = self.store.message(active.message_id)
            if stored is None:
                self.branches.answer_removed(active.message_id)
            else:
                self.answer_finished.emit(stored)
        self.generating_changed.emit(False)
        self.busy_changed.emit(self.is_busy)
        self._refresh_list()

    def _save_partial(self) -> None:
        """Keep what was generated so far; an answer with no text at all is removed."""
        if self.active is not None and not self.active.compare:
            save_partial(self.store, self.active)

    def _emit_progress(self) -> None:
        active = self.active
        if active is not None and not active.compare:
            self.answer_updated.emit(active.message_id, active.live)
            keep_partial(self.store, active)   # saved as it streams, marked interrupted until it ends

    # --- models --------------------------------------------------------------------------------

    def can_change_models(self) -> bool:
        """False, with the reason in a notice, while an answer or a load is under way."""
        if self.is_busy:
            self.notice.emit(BUSY_WITH_MODELS, "error")
        return not self.is_busy

    def load_pair(self, main_path: str, draft_path: str | None = None) -> bool:
        """Load a main model and (optionally, "" or None for none) its draft on the worker."""
        if not self.can_change_models():
            return False
        try:
            main_params = self.settings.main_params(main_path)
        except QuickdraftError as exc:   # its chat template's file is gone: said, nothing unloaded
            self.notice.emit(str(exc), "error")
            return False
        request = LoadRequest(main_params,
                              self.settings.draft_params(draft_path) if draft_path else None,
                              StatesConfig(self.paths.states_dir, self.settings.conversation_cache_mb << 20),
                              self.settings.suffix_config(self.paths.suffix_index_dir))
        self._load_cancel = request.cancel
        self.loading = True
        self.model_loading.emit(Path(main_path).name)
        self.busy_changed.emit(True)
        self._load.emit(request)
        return True

    def connect_remote(self, request: RemoteRequest) -> bool:
        """Chat through an OpenAI-compatible server instead of local models."""
        if not self.can_change_models():
            return False
        self.loading = True
        self._remote_key = request.api_key or ""
        self.model_loading.emit(request.url)
        self.busy_changed.emit(True)
        self._connect_remote.emit(request)
        return True

    def _on_loaded(self, info: LoadedPair) -> None:
        self.loading = False
        self.loaded = info
        self.models_loaded.emit(info)
        self.busy_changed.emit(self.is_busy)
        self.save_settings(settings_after_load(self.settings, info, self._remote_key))
        self.notice_withdrawn.emit(self._load_warning)   # it spoke of the pair this one replaces
        self._load_warning = "Loaded with a warning: " + "; ".join(info.warnings) + "." if info.warnings else ""
        if self._load_warning:
            self.notice.emit(self._load_warning, "warning")
        else:
            self.notice_cleared.emit("error")

    def _on_load_failed(self, failure: LoadFailure) -> None:
        self.loading = False
        if not failure.previous_kept:
            self.loaded = None
        if self.loaded is None:
            self.models_unloaded.emit()
        else:
            self.models_loaded.emit(self.loaded)
        self.busy_changed.emit(self.is_busy)
        self.notice.emit(failure.message, "error")

    # --- settings ------------------------------------------------------------------------------

    def save_settings(self, settings: Settings) -> None:
        self.settings = settings
        try:
            self.settings_store.save(settings)
        except OSError as exc:
            self.notice.emit(f"Settings could not be saved: {exc}", "warning")

    def update_settings(self, **changes) -> None:
        self.save_settings(replace(self.settings, **changes))

    def set_drafter(self, kind: str) -> None:
        if kind != self.settings.drafter:
            self.update_settings(drafter=kind)

    def set_colour_tokens(self, on: bool) -> None:
        if on != self.settings.colour_tokens:
            self.update_settings(colour_tokens=on)
            self.colour_tokens_changed.emit(on)

    # --- quitting ------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Cancel (a load too), let the worker end its step and thread, take in what it sent and save a
        partial answer. Blocking on the thread, not spinning an event loop: on Python 3.11 each PySide
        call that returns nothing may cost a reference to None."""
        if self.closed:
            return
        self.closed = True
        self.stop()
        self._repaint_timer.stop()
        self._load_cancel.set()   # a load ends at llama.cpp's next tensor; the finish waits behind it
        self._finish.emit()
        self.thread.wait()
        QCoreApplication.sendPostedEvents()   # its last batches, summary and idle, in order
        self._save_partial()
        self.store.close()


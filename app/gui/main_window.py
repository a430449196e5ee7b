"""The main window: conversations, chat, model choice, settings and live speculation statistics.

Only this window talks to the worker. Requests go out by queued signals; results come back as
signals, are buffered, and the view repaints on a timer (REPAINT_MS), never once per token.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QSize, Qt, QThread, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (QLabel, QMainWindow, QScrollArea, QSplitter, QTabWidget, QVBoxLayout, QWidget)

from app import __version__
from app.core.events import Round, Summary, TokenPiece
from app.gui.banner import Banner
from app.gui.charts import ChartsPanel
from app.gui.composer import Composer
from app.gui.conversation_list import ConversationList
from app.gui.live_stats import LiveStats, message_stats
from app.gui.message_view import ChatView, MessageWidget
from app.gui.model_bar import ModelBar
from app.gui.settings_panel import SettingsPanel
from app.gui.stats_panel import StatsPanel
from app.gui.hardware_status import HardwareStatus
from app.gui.worker import (Batch, CompareResult, EngineWorker, GenerateRequest, LoadedInfo, LoadFailure,
                            LoadRequest, Started)
from app.paths import AppPaths
from app.storage.conversations import ConversationStore
from app.storage.opening import open_storage
from app.storage.settings import Settings, SettingsStore

REPAINT_MS = 150          # ~7 Hz: counters, charts and the streaming message
TITLE_CHARS = 48
PREFERRED_SIZE = QSize(1440, 900)
MINIMUM_SIZE = QSize(1000, 700)   # a 1280x800 screen, less a taskbar and the title bar
MODEL_MANAGER_MODULE = "app.gui.model_manager"


@dataclass
class ActiveGeneration:
    request: GenerateRequest
    conversation_id: int
    message_id: int                 # the assistant message being written (or compared)
    widget: MessageWidget | None
    compare: bool = False
    live: LiveStats = field(default_factory=LiveStats)
    started_at: float | None = None   # the worker's time.monotonic() when decoding began


def opening_size() -> QSize:
    """The preferred size, shrunk to the screen's available area (never below the minimum)."""
    screen = QGuiApplication.primaryScreen()
    size = PREFERRED_SIZE.boundedTo(screen.availableGeometry().size()) if screen else PREFERRED_SIZE
    return size.expandedTo(MINIMUM_SIZE)


class MainWindow(QMainWindow):
    _load = Signal(object)          # LoadRequest, to the worker
    _generate = Signal(object)      # GenerateRequest, to the worker
    _finish = Signal()              # to the worker: free the models and end the thread

    def __init__(self, paths: AppPaths, settings_store: SettingsStore | None = None,
                 conversations: ConversationStore | None = None, autoload: bool = True):
        super().__init__()
        self.paths = paths
        storage = open_storage(paths, settings_store, conversations)
        self.settings_store = storage.settings_store
        self.settings: Settings = storage.settings
        self.store = storage.conversations
        self.conversation_id: int | None = None
        self.loaded: LoadedInfo | None = None
        self.loading = False
        self.active: ActiveGeneration | None = None
        self.last_generation: ActiveGeneration | None = None
        self.last_compare: CompareResult | None = None
        self._closed = False
        self.model_manager = None
        self._build_ui()
        self._build_menu()
        self._start_worker()
        self._repaint_timer = QTimer(self)
        self._repaint_timer.setInterval(REPAINT_MS)
        self._repaint_timer.timeout.connect(self._repaint)
        self._restore()
        if storage.problems:
            self.banner.show_message("\n".join(storage.problems), "warning")
        if autoload and self.settings.main_model and Path(self.settings.main_model).is_file():
            self.set_model_pair(self.settings.main_model, self.settings.draft_model or None)

    # --- building ------------------------------------------------------------------------------

    def _build_ui(self) -> None:
        self.setWindowTitle(f"Quickdraft {__version__}")
        self.setMinimumSize(MINIMUM_SIZE)
        self.resize(opening_size())
        self.model_bar = ModelBar(self.paths.models_dir)
        self.conversation_list = ConversationList()
        self.banner = Banner()
        self.chat_view = ChatView()
        self.composer = Composer()
        self.stats_panel = StatsPanel()
        self.charts = ChartsPanel()
        self.settings_panel = SettingsPanel(self.settings)
        self.hardware = HardwareStatus()
        self.statusBar().addPermanentWidget(self.hardware, 1)
        self._connect_widgets()

        chat = QWidget()
        chat_layout = QVBoxLayout(chat)
        chat_layout.setContentsMargins(0, 8, 0, 0)
        chat_layout.setSpacing(0)
        banner_row = QVBoxLayout()
        banner_row.setContentsMargins(16, 0, 16, 4)
        banner_row.addWidget(self.banner)
        chat_layout.addLayout(banner_row)
        chat_layout.addWidget(self.chat_view, 1)
        chat_layout.addWidget(self.composer)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.conversation_list)
        splitter.addWidget(chat)
        splitter.addWidget(self._side_panel())
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([240, 760, 440])
        splitter.setChildrenCollapsible(False)

        central = QWidget()
        central.setObjectName("central")
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.model_bar)
        layout.addWidget(splitter, 1)
        self.setCentralWidget(central)

    def _side_panel(self) -> QWidget:
        speculation = QWidget()
        layout = QVBoxLayout(speculation)
        layout.setContentsMargins(10, 10, 10, 10)
        layout.setSpacing(8)
        title = QLabel("LIVE SPECULATION")
        title.setObjectName("sectionTitle")
        layout.addWidget(title)
        layout.addWidget(self.stats_panel)
        layout.addWidget(self.charts, 1)
        tabs = QTabWidget()
        tabs.setMinimumWidth(400)
        tabs.addTab(speculation, "Speculation")
        tabs.addTab(self._scrollable(self.settings_panel), "Settings")
        self.side_tabs = tabs
        return self._padded(tabs)

    @staticmethod
    def _scrollable(widget: QWidget) -> QScrollArea:
        """The long settings form scrolls rather than making the window taller than a small screen."""
        area = QScrollArea()
        area.setWidgetResizable(True)
        area.setFrameShape(QScrollArea.Shape.NoFrame)
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        area.setWidget(widget)
        return area

    @staticmethod
    def _padded(widget: QWidget) -> QWidget:
        holder = QWidget()
        layout = QVBoxLayout(holder)
        layout.setContentsMargins(6, 12, 12, 12)
        layout.addWidget(widget)
        return holder

    def _connect_widgets(self) -> None:
        self.model_bar.load_requested.connect(self._load_pair)
        self.model_bar.problem.connect(self.show_error)
        self.model_bar.drafter_changed.connect(lambda kind: self._update_settings(drafter=kind))
        self.conversation_list.selected.connect(self.select_conversation)
        self.conversation_list.new_requested.connect(lambda: self.new_conversation())
        self.conversation_list.renamed.connect(self.rename_conversation)
        self.conversation_list.delete_requested.connect(self.delete_conversation)
        self.conversation_list.search_changed.connect(lambda _text: self._refresh_list())
        self.composer.send_requested.connect(self.send_message)
        self.composer.stop_requested.connect(self.stop)
        self.composer.regenerate_requested.connect(self.regenerate)
        self.composer.system_prompt_edited.connect(self._system_prompt_edited)
        self.composer.colour_tokens_toggled.connect(self.set_colour_tokens)
        self.chat_view.compare_requested.connect(self.compare)
        self.settings_panel.changed.connect(self._settings_edited)

    def _build_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "New conversation", lambda: self.new_conversation(), QKeySequence.StandardKey.New)
        file_menu.addSeparator()
        self._action(file_menu, "Quit", self.close, QKeySequence.StandardKey.Quit)
        models = self.menuBar().addMenu("&Models")
        self.model_manager_action = self._action(models, "Models…", self.open_model_manager)
        self._action(models, "Open main model…", self.model_bar._browse_main)
        self._action(models, "Open draft model…", self.model_bar._browse_draft)
        self._action(models, "Reload models", self.model_bar.request_load)
        view = self.menuBar().addMenu("&View")
        self.colour_action = self._action(view, "Colour tokens by origin", self.composer.colour_tokens.toggle)

    def _action(self, menu, text: str, slot, shortcut=None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _start_worker(self) -> None:
        self.thread = QThread(self)
        self.thread.setObjectName("engine-worker")
        self.worker = EngineWorker(self.paths.profiles_dir)
        self.worker.moveToThread(self.thread)
        self._load.connect(self.worker.load, Qt.ConnectionType.QueuedConnection)
        self._generate.connect(self.worker.generate, Qt.ConnectionType.QueuedConnection)
        self._finish.connect(self.worker.finish, Qt.ConnectionType.QueuedConnection)
        self.worker.loading.connect(self.model_bar.set_loading)
        self.worker.loaded.connect(self._on_loaded)
        self.worker.load_failed.connect(self._on_load_failed)
        self.worker.started.connect(self._on_started)
        self.worker.batch.connect(self._on_batch)
        self.worker.finished.connect(self._on_finished)
        self.worker.compared.connect(self._on_compared)
        self.worker.failed.connect(self._on_failed)
        self.worker.idle.connect(self._on_idle)
        self.thread.start()

    def _restore(self) -> None:
        self.model_bar.set_recent(list(self.settings.recent_main), list(self.settings.recent_drafts))
        self.model_bar.set_drafter(self.settings.drafter)
        self.composer.colour_tokens.setChecked(self.settings.colour_tokens)
        self.hardware.show_system()
        conversations = self.store.conversations()
        if conversations:
            self.select_conversation(conversations[0].id)
        else:
            self.composer.system_prompt.setText(self.settings.default_system_prompt)
            self._refresh_list()

    # --- public API ----------------------------------------------------------------------------

    @property
    def is_generating(self) -> bool:
        return self.active is not None

    @property
    def is_busy(self) -> bool:
        return self.active is not None or self.loading

    def error_text(self) -> str:
        return self.banner.text() if self.banner.kind == "error" else ""

    def show_error(self, message: str) -> None:
        self.banner.show_message(message, "error")

    def set_model_pair(self, main_path: str, draft_path: str | None) -> bool:
        """Select and load a main model and (optionally) its draft. Returns False, with the reason
        in the banner, when the draft cannot draft for that main model or a model is busy."""
        if self.is_busy:
            self.show_error("Wait for the current answer or load to finish before changing models.")
            return False
        self.model_bar.set_main(main_path)
        if not self.model_bar.set_draft(draft_path or ""):
            return False
        self._load_pair(main_path, draft_path or "")
        return True

    def open_model_manager(self) -> None:
        """Open the model manager if it is installed; its chosen pair is loaded here."""
        try:
            dialog_class = importlib.import_module(MODEL_MANAGER_MODULE).ModelManagerDialog
        except ModuleNotFoundError as exc:
            if exc.name and (exc.name == MODEL_MANAGER_MODULE or MODEL_MANAGER_MODULE.startswith(exc.name + ".")):
                self.show_error("The model manager is not installed")
                return
            raise  # the module exists but something it imports is missing: a bug to see, not hide
        except AttributeError:
            self.show_error("The model manager is not installed")
            return
        try:
            dialog = dialog_class(self.paths, self)
        except OSError as exc:  # the models folder cannot be created or read
            self.show_error(f"The model manager cannot open: {exc}")
            return
        dialog.pair_chosen.connect(lambda main, draft: self.set_model_pair(main, draft or None))
        dialog.show()
        self.model_manager = dialog

    def new_conversation(self, system_prompt: str | None = None) -> int:
        prompt = self.settings.default_system_prompt if system_prompt is None else system_prompt
        conv = self.store.create("New chat", prompt)
        self.select_conversation(conv.id)
        return conv.id

    def select_conversation(self, conversation_id: int) -> None:
        if self.is_generating or self.store.get(conversation_id) is None:
            return
        self.conversation_id = conversation_id
        self._show_conversation(conversation_id)
        self._refresh_list()

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename(conversation_id, title.strip() or "Untitled")
        self._refresh_list()

    def delete_conversation(self, conversation_id: int) -> None:
        if self.is_generating and self.active.conversation_id == conversation_id:
            self.show_error("Stop the answer before deleting its conversation.")
            return
        self.store.delete(conversation_id)
        if conversation_id == self.conversation_id:
            self.conversation_id = None
            remaining = self.store.conversations()
            if remaining:
                self.select_conversation(remaining[0].id)
                return
            self.chat_view.clear()
            self.composer.system_prompt.setText(self.settings.default_system_prompt)
        self._refresh_list()

    def send_message(self, text: str) -> bool:
        """Add ``text`` as the user's message and start answering it. False when it cannot start
        (the reason is shown, and the text stays in the composer)."""
        text = text.strip()
        if not text or not self._ready_to_generate():
            return False
        if self.conversation_id is None:  # the first message: keep the system prompt typed so far
            self.new_conversation(self.composer.system_prompt.text())
        conv = self.store.get(self.conversation_id)
        if conv.title == "New chat" and not self.store.messages(conv.id):
            self.store.rename(conv.id, _title_from(text))
        message = self.store.add_message(self.conversation_id, "user", text)
        self.chat_view.add_message(message.id, "user", text)
        self.composer.clear_input()
        self._refresh_list()
        self._start_answer()
        return True

    def stop(self) -> None:
        if self.active is not None:
            self.active.request.cancel.set()

    def regenerate(self) -> bool:
        """Replace the last answer with a new one (or answer a last message that has none)."""
        if self.conversation_id is None or not self._ready_to_generate():
            return False
        messages = self.store.messages(self.conversation_id)
        if not messages:
            return False
        if messages[-1].role == "assistant":
            self.store.delete_message(messages[-1].id)
            widget = self.chat_view.find(messages[-1].id)
            if widget is not None:
                self.chat_view.remove_message(widget)
        self._start_answer()
        return True

    def compare(self, message_id: int) -> bool:
        """Answer again greedily with and without the draft; report the speedup and whether the
        two outputs are identical. The answer shown is kept; its footer gains the speedup."""
        if not self._ready_to_generate():
            return False
        if self.loaded is None or self.loaded.draft_path is None:
            self.show_error("Load a draft model to compare speculative decoding with the main model alone.")
            return False
        history = self._history_before(message_id)
        if history is None:
            return False
        request = GenerateRequest(tuple(history), self.settings.sampling(), self.settings.speculation(),
                                  "model", compare=True)
        self.last_compare = None
        self._begin(ActiveGeneration(request, self.conversation_id, message_id, None, compare=True))
        self.banner.show_message("Comparing: greedy with the draft, then the main model alone…", "info")
        return True

    def set_colour_tokens(self, on: bool) -> None:
        self.chat_view.set_colour_tokens(on)
        if self.composer.colour_tokens.isChecked() != on:
            self.composer.colour_tokens.setChecked(on)
        if self.settings.colour_tokens != on:
            self._update_settings(colour_tokens=on)

    # --- generation ----------------------------------------------------------------------------

    def _ready_to_generate(self) -> bool:
        if self.is_generating:
            return False
        if self.loading:
            self.show_error("The models are still loading.")
            return False
        if self.loaded is None:
            self.show_error("No model is loaded. Choose a main model in the bar above and press Load.")
            return False
        problem = self.settings.generation_problem()
        if problem:
            self.show_error(problem)
        return not problem

    def _prompt_messages(self, conversation_id: int, upto_id: int | None = None) -> list[dict]:
        conv = self.store.get(conversation_id)
        messages = [{"role": "system", "content": conv.system_prompt}] if conv.system_prompt.strip() else []
        for m in self.store.messages(conversation_id):
            if upto_id is not None and m.id >= upto_id:
                break
            if m.content:
                messages.append({"role": m.role, "content": m.content})
        return messages

    def _history_before(self, message_id: int) -> list[dict] | None:
        stored = self.store.message(message_id)
        if stored is None or stored.role != "assistant":
            return None
        return self._prompt_messages(stored.conversation_id, upto_id=message_id)

    def _drafter(self) -> str:
        """The chosen drafter; without a draft model loaded, lookup still works and "model" is off."""
        has_draft = self.loaded is not None and self.loaded.draft_path is not None
        kind = self.settings.drafter
        if not has_draft and kind in ("model", "lookup+model"):
            return "lookup" if kind == "lookup+model" else "none"
        return kind

    def _start_answer(self) -> None:
        # the request first: if it cannot be made, no empty answer is saved or left "generating…"
        request = GenerateRequest(tuple(self._prompt_messages(self.conversation_id)), self.settings.sampling(),
                                  self.settings.speculation(), self._drafter())
        message = self.store.add_message(self.conversation_id, "assistant", "")
        widget = self.chat_view.add_message(message.id, "assistant")
        widget.set_streaming(True)
        self._begin(ActiveGeneration(request, self.conversation_id, message.id, widget))

    def _begin(self, active: ActiveGeneration) -> None:
        self.active = active
        if self.banner.kind == "error":
            self.banner.clear()
        self.stats_panel.clear()
        self.charts.clear()
        self.composer.set_generating(True)
        self.model_bar.set_busy(True)
        self.conversation_list.set_busy(True)
        self._repaint_timer.start()
        self._generate.emit(active.request)

    def _on_started(self, started: Started) -> None:
        if self.active is not None:
            self.active.live.prompt_tokens = started.prompt_tokens
            self.active.started_at = started.monotonic_start

    def _on_batch(self, batch: Batch) -> None:
        if self.active is None or self.active.compare:
            return
        live = self.active.live
        for event, at in zip(batch.events, batch.times):
            if isinstance(event, TokenPiece):
                live.add_piece(event, at)
            elif isinstance(event, Round):
                live.add_round(event)

    def _on_finished(self, summary: Summary) -> None:
        active = self.active
        if active is None:
            return
        active.live.finish(summary)
        stats = message_stats(summary, active.request.drafter, self.loaded.main_name if self.loaded else "",
                              self.loaded.draft_name if self.loaded else None)
        runs = [tuple(r) for r in active.live.runs]
        text = summary.text or active.live.text
        self.store.update_message(active.message_id, text, stats, runs)
        if active.widget is not None:
            active.widget.set_content(text, runs)
            active.widget.set_stats(stats)
        if summary.error:
            self.show_error(summary.error)
        elif summary.warnings:
            self.banner.show_message("; ".join(summary.warnings), "warning")

    def _on_compared(self, result: CompareResult) -> None:
        active = self.active
        self.last_compare = result
        if active is None:
            return
        stored = self.store.message(active.message_id)
        if stored is None:
            return
        stats = dict(stored.stats, speedup=result.speedup, compare_identical=result.identical,
                     compare_speculative_tps=result.speculative.generation_tps,
                     compare_baseline_tps=result.baseline.generation_tps)
        self.store.update_message(stored.id, stored.content, stats)
        widget = self.chat_view.find(stored.id)
        if widget is not None:
            widget.set_stats(stats)
        same = "the outputs are identical" if result.identical else "the outputs differ"
        self.banner.show_message(
            f"Compare (greedy): with the draft {result.speculative.generation_tps:.1f} tok/s, main model alone "
            f"{result.baseline.generation_tps:.1f} tok/s: {result.speedup:.2f}x speedup; {same}.", "info")

    def _on_failed(self, message: str) -> None:
        if self.active is not None and not self.active.compare:
            self._save_partial()
        elif self.active is not None:
            self.banner.clear()
        self.show_error(message)

    def _on_idle(self) -> None:
        active = self.active
        if active is None:
            return
        if active.compare and self.banner.kind == "info" and self.last_compare is None:
            self.banner.clear()
        self._repaint()
        if active.widget is not None:
            active.widget.set_streaming(False)
        self.last_generation = active
        self.active = None
        self._repaint_timer.stop()
        self.composer.set_generating(False)
        self.model_bar.set_busy(False)
        self.conversation_list.set_busy(False)
        self._refresh_list()

    def _save_partial(self) -> None:
        """Keep what was generated so far; an answer with no text at all is removed."""
        active = self.active
        if active is None or active.compare:
            return
        text = active.live.text
        if text:
            self.store.update_message(active.message_id, text, {}, [tuple(r) for r in active.live.runs])
            if active.widget is not None:
                active.widget.set_content(text, active.live.runs)
        else:
            self.store.delete_message(active.message_id)
            if active.widget is not None:
                self.chat_view.remove_message(active.widget)
                active.widget = None

    def _repaint(self) -> None:
        active = self.active
        if active is None or active.compare:
            return
        live = active.live
        self.stats_panel.update_from(live)
        self.charts.update_from(live)
        if active.widget is not None and live.text != active.widget.text:
            active.widget.set_content(live.text, live.runs)

    # --- models --------------------------------------------------------------------------------

    def _load_pair(self, main_path: str, draft_path: str) -> None:
        if self.is_busy:
            self.show_error("Wait for the current answer or load to finish before changing models.")
            return
        request = LoadRequest(self.settings.main_params(main_path),
                              self.settings.draft_params(draft_path) if draft_path else None)
        self.loading = True
        self.model_bar.set_loading(Path(main_path).name)
        self.composer.send_button.setEnabled(False)
        self._load.emit(request)

    def _on_loaded(self, info: LoadedInfo) -> None:
        self.loading = False
        self.loaded = info
        self.model_bar.set_loaded(info.main_name, info.draft_name)
        self.hardware.show_placement(info.placement)
        self.composer.set_generating(False)
        settings = replace(self.settings, main_model=info.main_path, draft_model=info.draft_path or "")
        settings = settings.with_recent_main(info.main_path)
        if info.draft_path:
            settings = settings.with_recent_draft(info.draft_path)
        self._save_settings(settings)
        if info.warnings:
            self.banner.show_message("Loaded with a warning: " + "; ".join(info.warnings) + ".", "warning")
        elif self.banner.kind == "error":
            self.banner.clear()

    def _on_load_failed(self, failure: LoadFailure) -> None:
        self.loading = False
        if not failure.previous_kept:
            self.loaded = None
        if self.loaded is None:
            self.model_bar.set_unloaded()
            self.hardware.show_placement(())
        else:
            self.model_bar.set_loaded(self.loaded.main_name, self.loaded.draft_name)
        self.composer.set_generating(False)
        self.show_error(failure.message)

    # --- settings and conversations ------------------------------------------------------------

    def _settings_edited(self, settings: Settings) -> None:
        self._save_settings(settings)

    def _update_settings(self, **changes) -> None:
        self._save_settings(replace(self.settings, **changes))

    def _save_settings(self, settings: Settings) -> None:
        self.settings = settings
        try:
            self.settings_store.save(settings)
        except OSError as exc:
            self.banner.show_message(f"Settings could not be saved: {exc}", "warning")

    def _system_prompt_edited(self, text: str) -> None:
        if self.conversation_id is not None:
            self.store.set_system_prompt(self.conversation_id, text)

    def _refresh_list(self) -> None:
        search = self.conversation_list.search.text().strip()
        self.conversation_list.show_conversations(self.store.conversations(search), self.conversation_id)

    def _show_conversation(self, conversation_id: int) -> None:
        conv = self.store.get(conversation_id)
        self.chat_view.clear()
        self.composer.system_prompt.setText(conv.system_prompt)
        for m in self.store.messages(conversation_id):
            self.chat_view.add_message(m.id, m.role, m.content, m.stats, m.pieces)

    # --- quitting ------------------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self._closed:
            self._shut_down()
        super().closeEvent(event)

    def _shut_down(self) -> None:
        """Cancel, let the worker end its current step and stop its thread, then take in what it
        sent meanwhile. The GUI thread blocks on the worker's thread rather than spinning an event
        loop: on Python 3.11 each PySide call that returns nothing may cost a reference to None."""
        self._closed = True
        self.stop()
        self._repaint_timer.stop()
        self._finish.emit()   # queued behind the step the worker is in: a load cannot be cut short
        self.thread.wait()
        QCoreApplication.sendPostedEvents()   # its last batches, summary and idle, in order
        self._save_partial()
        self.store.close()


def _title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"

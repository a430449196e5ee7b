"""The main window: builds the widgets and wires them to the ChatController, nothing more.

The controller owns conversations, generations, models and settings and signals what to show;
the live numbers arrive on its repaint timer (controller.REPAINT_MS), never once per token.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QMessageBox, QScrollArea, QTabWidget, QVBoxLayout, QWidget

from app import __version__
from app.core.frontdoor import LoadedPair
from app.core.params import DrafterKind
from app.gui.chat.composer import Composer
from app.gui.chat.conversation_list import ConversationList
from app.gui.chat.message_view import ChatView
from app.gui.models.first_run import FirstRunPanel
from app.gui.models.model_bar import ModelBar
from app.gui.models.remote_dialog import RemoteDialog
from app.gui.panels.hardware_status import HardwareStatus
from app.gui.panels.server_control import ServerControl
from app.gui.panels.server_panel import ServerPanel
from app.gui.panels.settings_panel import SettingsPanel
from app.gui.panels.stats_panel import SpeculationPanel
from app.gui.runtime.chat_values import ShownConversation
from app.gui.runtime.controller import ChatController
from app.gui.runtime.live_stats import LiveStats, stored_stats
from app.gui.runtime.worker import RemoteRequest, ServerState
from app.gui.widgets.banner import Banner
from app.gui.widgets.columns import Columns, ColumnState
from app.models.memory import machine_memory
from app.models.pairing import first_pair, imported_pair
from app.paths import AppPaths
from app.storage.conversations import ConversationStore
from app.storage.settings import SettingsStore

PREFERRED_SIZE = QSize(1440, 900)
MINIMUM_SIZE = QSize(1000, 700)   # a 1280x800 screen, less a taskbar and the title bar


def opening_size() -> QSize:
    """The preferred size, shrunk to the screen's available area (never below the minimum)."""
    screen = QGuiApplication.primaryScreen()
    size = PREFERRED_SIZE.boundedTo(screen.availableGeometry().size()) if screen else PREFERRED_SIZE
    return size.expandedTo(MINIMUM_SIZE)


class MainWindow(QMainWindow):
    def __init__(self, paths: AppPaths, settings_store: SettingsStore | None = None,
                 conversations: ConversationStore | None = None, autoload: bool = True):
        super().__init__()
        self.paths = paths
        self.model_manager = None
        self.controller = ChatController(paths, settings_store, conversations, parent=self)
        self.server = ServerControl(self.controller, parent=self)
        self._build_ui()
        self._build_menu()
        self._restore()
        self._wire()
        self.controller.start()
        pair = (self.controller.settings.saved_pair() or self._first_pair()) if autoload else None
        if pair is not None:
            self.set_model_pair(*pair)

    # --- building ------------------------------------------------------------------------------

    def _build_ui(self) -> None:
        self.setWindowTitle(f"Quickdraft {__version__}")
        self.setMinimumSize(MINIMUM_SIZE)
        self.resize(opening_size())
        self.model_bar = ModelBar(self.paths.models_dir)
        self.conversation_list = ConversationList()
        self.banner = Banner()
        self.chat_view = ChatView()
        self.first_run = FirstRunPanel(self.paths)
        self.composer = Composer()
        self.speculation = SpeculationPanel()
        self.stats_panel, self.charts = self.speculation.stats, self.speculation.charts
        self.settings_panel = SettingsPanel(self.controller.settings, suffix_folder=self.controller.paths.suffix_index_dir)
        self.server_panel = ServerPanel(self.controller.settings)
        self.hardware = HardwareStatus()
        self.statusBar().addPermanentWidget(self.hardware, 1)

        chat = QWidget()
        chat_layout = QVBoxLayout(chat)
        chat_layout.setContentsMargins(0, 8, 0, 0)
        chat_layout.setSpacing(0)
        banner_row = QVBoxLayout()
        banner_row.setContentsMargins(16, 0, 16, 4)
        banner_row.addWidget(self.banner)
        chat_layout.addLayout(banner_row)
        self.first_run_area = _scrollable(self.first_run)
        chat_layout.addWidget(self.first_run_area, 1)
        chat_layout.addWidget(self.chat_view, 1)
        chat_layout.addWidget(self.composer)

        self.columns = Columns(self.conversation_list, chat, self._side_panel())

        central = QWidget()
        central.setObjectName("central")
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.model_bar)
        layout.addWidget(self.columns, 1)
        self.setCentralWidget(central)

    def _side_panel(self) -> QWidget:
        tabs = QTabWidget()
        tabs.addTab(self.speculation, "Speculation")
        tabs.addTab(_scrollable(self.settings_panel), "Settings")
        tabs.addTab(_scrollable(self.server_panel), "Server")
        self.side_tabs = tabs
        holder = QWidget()
        padding = QVBoxLayout(holder)
        padding.setContentsMargins(6, 12, 12, 12)
        padding.addWidget(tabs)
        return holder

    def _build_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "New conversation", lambda: self.controller.new_conversation(),
                     QKeySequence(QKeySequence.StandardKey.New))
        file_menu.addSeparator()
        self._action(file_menu, "Quit", self.close, QKeySequence(QKeySequence.StandardKey.Quit))
        models = self.menuBar().addMenu("&Models")
        self.model_manager_action = self._action(models, "Models…", self.open_model_manager)
        self._action(models, "Open main model…", lambda: self.model_bar.browse_main())
        self._action(models, "Open draft model…", lambda: self.model_bar.browse_draft())
        self._action(models, "Reload models", self.model_bar.request_load)
        models.addSeparator()
        self._action(models, "Connect to a server…", self.connect_to_server)
        chat = self.menuBar().addMenu("&Chat")
        # the keys browsers and chat apps use: Esc stops, Ctrl+Tab / Ctrl+PgDown go to the next tab, Ctrl+L
        # goes to the address bar (here: the message box), Ctrl+R reloads (here: answers again)
        self._action(chat, "Stop the answer", lambda: self.controller.stop(), "Esc")
        self._action(chat, "Regenerate", lambda: self.controller.regenerate(), "Ctrl+R")
        # Alt+Left / Alt+Right go back and forward in browsers: here between the last answer's versions
        self._action(chat, "Previous version of the last answer", lambda: self.controller.branches.flip_last(-1),
                     "Alt+Left")
        self._action(chat, "Next version of the last answer", lambda: self.controller.branches.flip_last(1), "Alt+Right")
        self._action(chat, "Go to the message box", self.composer.focus_input, "Ctrl+L")
        chat.addSeparator()
        self._action(chat, "Next conversation", lambda: self.conversation_list.select_next(1), "Ctrl+Tab", "Ctrl+PgDown")
        self._action(chat, "Previous conversation", lambda: self.conversation_list.select_next(-1),
                     "Ctrl+Shift+Tab", "Ctrl+PgUp")
        view = self.menuBar().addMenu("&View")
        self.colour_action = self._action(view, "Colour tokens by origin", self.composer.toggle_colour_tokens)
        view.addSeparator()
        # Ctrl+B hides the sidebar in editors and browsers; with Shift, the panel on the other side
        self.list_action = self._toggle(view, "Conversation list", 0, "Ctrl+B")
        self.side_action = self._toggle(view, "Side panel (Speculation, Settings, Server)", 1, "Ctrl+Shift+B")
        help_menu = self.menuBar().addMenu("&Help")
        self._action(help_menu, "Keyboard shortcuts", self.show_shortcuts, "F1")

    def _action(self, menu, text: str, slot, *shortcuts) -> QAction:
        action = QAction(text, self)
        action.setShortcuts([QKeySequence(k) for k in shortcuts])
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _toggle(self, menu, text: str, column: int, keys: str) -> QAction:
        """A checked menu entry that shows or hides a side column (0: the conversation list, 1: the side panel)."""
        action = self._action(menu, text, lambda on: self.columns.set_shown(column, on), keys)
        action.setCheckable(True)
        action.setChecked(self.columns.is_shown(column))
        return action

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do) for every menu action with keys: the list Help shows, read off the menus
        themselves so that it cannot drift from them."""
        rows = []
        for menu in self.menuBar().findChildren(QMenu):
            for action in menu.actions():
                keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts())
                if keys:
                    rows.append((keys, f"{menu.title().replace('&', '')} › {action.text()}"))
        return rows

    def show_shortcuts(self) -> None:
        rows = "".join(f"<tr><td><b>{keys}</b>&nbsp;&nbsp;</td><td>{what}</td></tr>"
                       for keys, what in self.shortcut_rows())
        extra = ("<tr><td><b>Enter</b></td><td>send the message</td></tr>"
                 "<tr><td><b>Shift+Enter</b></td><td>a new line in the message</td></tr>"
                 "<tr><td><b>Esc</b></td><td>in a message being edited: leave it as it was</td></tr>")
        QMessageBox.information(self, "Keyboard shortcuts", f"<table>{rows}{extra}</table>")

    def _restore(self) -> None:
        settings = self.controller.settings
        self.model_bar.set_recent(list(settings.recent_main), list(settings.recent_drafts))
        self.model_bar.set_drafter(settings.drafter)
        self.model_bar.set_remotes(list(settings.recent_remotes))
        self.hardware.show_system()
        self._show_first_run()
        self.columns.restore(ColumnState(settings.conversations_width, settings.side_panel_width,
                                         settings.conversations_shown, settings.side_panel_shown))
        self.list_action.setChecked(self.columns.is_shown(0))
        self.side_action.setChecked(self.columns.is_shown(1))

    def _wire(self) -> None:
        """Every connection between the widgets and the controller, in both directions."""
        c = self.controller
        self.model_bar.load_requested.connect(c.load_pair)
        self.model_bar.remote_requested.connect(
            lambda url: c.connect_remote(RemoteRequest(url, c.settings.remote_api_key or None)))
        self.model_bar.problem.connect(self.show_error)
        self.model_bar.drafter_changed.connect(c.set_drafter)
        self.conversation_list.selected.connect(c.select_conversation)
        self.conversation_list.new_requested.connect(lambda: c.new_conversation())
        self.conversation_list.renamed.connect(c.rename_conversation)
        self.conversation_list.delete_requested.connect(c.delete_conversation)
        self.conversation_list.search_changed.connect(c.set_search)
        self.composer.send_requested.connect(self._send)
        self.composer.stop_requested.connect(c.stop)
        self.composer.regenerate_requested.connect(c.regenerate)
        self.composer.system_prompt_edited.connect(c.set_system_prompt)
        self.composer.colour_tokens_toggled.connect(c.set_colour_tokens)
        self.composer.thinking_toggled.connect(c.set_thinking)
        self.composer.attach_failed.connect(lambda message: self.banner.show_message(message, "error"))
        self.chat_view.compare_requested.connect(c.compare)
        self.chat_view.regenerate_requested.connect(c.regenerate)
        self.chat_view.edit_submitted.connect(c.branches.edit)
        self.chat_view.version_requested.connect(c.branches.flip)
        self.chat_view.delete_requested.connect(c.branches.delete)
        # one field at a time: the panel's copy of the settings predates the pair loaded since, and saving
        # it whole made the next start open the pair loaded before
        self.settings_panel.edited.connect(lambda name, value: c.update_settings(**{name: value}))
        self.first_run.models_changed.connect(self._models_changed)
        self.server_panel.start_requested.connect(self.server.start)
        self.server_panel.stop_requested.connect(self.server.stop)
        self.server_panel.settings_edited.connect(
            lambda host, port, key: c.update_settings(server_host=host, server_port=port, server_api_key=key))
        self.server.state_changed.connect(self._show_server_state)
        self.server.request_started.connect(lambda: self._show_client_answer(None))
        self.server.request_updated.connect(self._show_client_answer)
        self.server.request_finished.connect(self.server_panel.count_request)
        self.first_run.pair_ready.connect(lambda main, draft: self.set_model_pair(main, draft))
        self.first_run.model_imported.connect(self._load_imported)
        self.first_run.manage_requested.connect(self.open_model_manager)

        c.conversations_changed.connect(self.conversation_list.show_conversations)
        c.conversation_shown.connect(self._show_conversation)
        c.message_added.connect(self.chat_view.add_stored)
        c.message_removed.connect(self.chat_view.remove_id)
        c.messages_cut.connect(self.chat_view.remove_from)
        c.message_updated.connect(self.chat_view.update_stats)
        c.answer_started.connect(self.chat_view.start_answer)
        c.answer_updated.connect(self._show_live)
        c.answer_finished.connect(self.chat_view.finish_answer)
        c.generating_changed.connect(self._show_generating)
        c.busy_changed.connect(lambda busy: self.composer.set_send_enabled(not busy))
        c.notice.connect(self.banner.show_message)
        self.model_bar.draft_chosen.connect(self._draft_chosen)
        c.notice_cleared.connect(self.banner.clear_if)
        c.notice_withdrawn.connect(self.banner.withdraw)
        c.notice_replaced.connect(self.banner.replace)
        c.model_loading.connect(self.model_bar.set_loading)
        c.models_loaded.connect(self._show_loaded)
        c.models_unloaded.connect(self._show_unloaded)
        c.colour_tokens_changed.connect(self._show_colour_tokens)

    # --- what the controller signals, shown ----------------------------------------------------

    def _send(self, text: str) -> None:
        if self.controller.send_message(text):
            self.composer.clear_input()

    def _show_conversation(self, shown: ShownConversation) -> None:
        self.chat_view.show_messages(shown.messages)
        self.composer.set_system_prompt(shown.system_prompt)
        self.composer.set_thinking(shown.thinking)
        self._show_last_answer(shown)

    def _show_last_answer(self, shown: ShownConversation) -> None:
        """The Speculation tab shows the numbers of the answer the conversation ends with (it kept the
        previous conversation's after a switch, and was empty after a restart); none: empty."""
        answers = [m for m in shown.messages if m.role == "assistant"]
        live = stored_stats(answers[-1].stats) if answers else None
        self.speculation.clear()
        if live is not None:
            self.speculation.update_from(live)

    def _show_live(self, message_id: int, live: LiveStats) -> None:
        self.chat_view.update_answer(message_id, live.text, live.runs, live.reasoning, live.thinking_s, live.thinking_now,
                                     live.status_line())
        self.speculation.update_from(live)

    def _show_generating(self, generating: bool) -> None:
        if generating and not self.controller.is_comparing:   # a compare keeps the answer's charts
            self.speculation.clear()
        self.composer.set_generating(generating)
        self.chat_view.set_generating(generating)
        self.model_bar.set_busy(generating)
        self.conversation_list.set_busy(generating)

    def _show_loaded(self, info: LoadedPair) -> None:
        if info.remote_url:
            self.model_bar.set_main(info.remote_url)
        self.model_bar.set_loaded(info.main_name, info.draft_name, info.remote_url or info.main_path,
                                  info.draft_path or "")
        self.composer.set_thinking_available(info.thinking_off is not None)   # its template has a switch
        self.chat_view.set_loaded(True)
        self.settings_panel.show_model("" if info.remote_url else info.main_path)   # a server keeps its own template
        self.hardware.show_placement(tuple(f"{name}: {where}" for name, where in info.placement))
        self._show_first_run()

    def _models_changed(self) -> None:
        """Something was installed or removed: the pickers and the first-run panel read it again."""
        self.model_bar.refresh()
        self._show_first_run()

    def _show_first_run(self) -> None:
        """With nothing installed, the chat area offers the next step instead of an empty chat."""
        self.controller.models_installed = self.model_bar.has_models
        self.first_run.update_visibility(self.model_bar.has_models or self.controller.loaded is not None)
        self.first_run_area.setVisible(not self.first_run.isHidden())
        self.chat_view.setVisible(self.first_run.isHidden())

    def _show_unloaded(self) -> None:
        self.model_bar.set_unloaded()
        self.composer.set_thinking_available(False)
        self.chat_view.set_loaded(False)
        self.hardware.show_placement(())

    def _show_server_state(self, state: ServerState) -> None:
        if state.url:
            self.server_panel.show_serving(state.url)
        else:
            self.server_panel.show_stopped(state.message)

    def _show_client_answer(self, live: LiveStats | None) -> None:
        """A server client's answer in the speculation panel, unless the window is answering."""
        if self.controller.is_generating:
            return
        if live is None:
            self.speculation.clear()
        else:
            self.speculation.update_from(live)

    def _show_colour_tokens(self, on: bool) -> None:
        self.chat_view.set_colour_tokens(on)
        self.composer.set_colour_tokens(on)

    # --- public API ----------------------------------------------------------------------------

    def error_text(self) -> str:
        return self.banner.text() if self.banner.kind == "error" else ""

    def show_error(self, message: str) -> None:
        self.banner.show_message(message, "error")

    def set_model_pair(self, main_path: str, draft_path: str | None) -> bool:
        """Select and load a main model and (optionally) its draft. Returns False, with the reason
        in the banner, when the draft cannot draft for that main model or a model is busy."""
        if not self.controller.can_change_models():
            return False
        self.model_bar.set_main(main_path)
        if not self.model_bar.set_draft(draft_path or ""):
            return False
        if not draft_path and self.model_bar.main_has_mtp():   # a pair that drafts with its own MTP heads
            self.model_bar.set_drafter(DrafterKind.MTP)
        return self.controller.load_pair(main_path, draft_path or "")

    def _first_pair(self, imported: tuple[str, ...] = ()) -> tuple[str, str | None] | None:
        """The pair app/models/pairing.py picks when none is chosen yet (at a first start, or after an
        import of ``imported``), said in the banner."""
        try:
            installed = self.model_bar.registry.list()
        except OSError:
            return None
        n_ctx = self.controller.settings.n_ctx
        if imported:
            choice = imported_pair(installed, [m for m in installed if str(m.path) in imported], machine_memory(), n_ctx)
        else:
            choice = first_pair(installed, machine_memory(), n_ctx)
        if choice is None:
            return None
        self.banner.show_message(choice.note, "info")
        return choice.main_path, choice.draft_path

    def _load_imported(self, paths: list[str]) -> None:
        """Files imported on the first-run panel: load the pair a first start would choose among them."""
        pair = self._first_pair(tuple(paths))
        if pair is not None:
            self.set_model_pair(*pair)

    def _draft_chosen(self, main: str, draft: str, kept: str) -> None:
        """The model bar chose the best draft for the main model the user picked: say so, with an undo."""
        self.banner.show_message(f"Draft: {Path(draft).name}, the best that can draft for {Path(main).name}.",
                                 "info", ("Undo", lambda: self.model_bar.set_draft(kept)))

    def connect_to_server(self) -> None:
        """Ask for an OpenAI-compatible server and chat through it instead of local models."""
        settings = self.controller.settings
        dialog = RemoteDialog(tuple(settings.recent_remotes), settings.remote_api_key, self)
        if dialog.exec():
            self.controller.connect_remote(dialog.request())

    def open_model_manager(self) -> None:
        """Open the model manager (imported when first opened: a window that never opens it loads
        nothing of it); its chosen pair is loaded here."""
        from app.gui.models.manager import ModelManagerDialog

        try:
            dialog = ModelManagerDialog(self.paths, self)
        except OSError as exc:  # the models folder cannot be created or read
            self.show_error(f"The model manager cannot open: {exc}")
            return
        dialog.pair_chosen.connect(lambda main, draft: self.set_model_pair(main, draft or None))
        dialog.models_changed.connect(self._models_changed)
        dialog.show()
        self.model_manager = dialog

    def closeEvent(self, event: QCloseEvent) -> None:
        state = self.columns.state()   # the columns as the user left them open next time
        self.controller.update_settings(conversations_width=state.list_width, side_panel_width=state.side_width,
                                        conversations_shown=state.list_shown, side_panel_shown=state.side_shown)
        self.first_run.shutdown()
        self.controller.shut_down()
        super().closeEvent(event)


def _scrollable(widget: QWidget) -> QScrollArea:
    """A long form (the settings, the first-run offers) scrolls rather than making the window
    taller than a small screen."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QScrollArea.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    area.setWidget(widget)
    return area

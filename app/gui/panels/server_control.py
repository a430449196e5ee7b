"""The window's side of the local server: asks the engine's thread to serve or stop, and turns what
the server's clients are answered into live numbers for the speculation panel. No widgets.

The engine thread serves the window's chat and the server's clients alike (app/server/slots.HostedJobs:
the clients in slots of their own, a round of each in turn, the window's answers between two turns), so
a client's request is just another answer the panel can show, one client's at a time.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, Signal

from app.gui.runtime.chat_values import feed
from app.gui.runtime.live_stats import LiveStats
from app.gui.runtime.worker import ServedEvents, ServeRequest, ServerState

UPDATE_S = 0.15   # the panel's repaint rate for a client's answer, as for the window's own


class ServerControl(QObject):
    state_changed = Signal(object)      # ServerState: serving at a URL, or stopped (with why)
    request_started = Signal()          # a client's answer begins
    request_updated = Signal(object)    # LiveStats of the client's answer, at most every UPDATE_S
    request_finished = Signal(object)   # Summary of a client's answer

    _start = Signal(object)             # ServeRequest, to the worker
    _stop = Signal()

    def __init__(self, controller, parent: QObject | None = None):
        super().__init__(parent)
        self.controller = controller
        self.url: str | None = None
        self.live: LiveStats | None = None
        self._updated_at = 0.0
        worker = controller.worker
        self._start.connect(worker.start_server, Qt.ConnectionType.QueuedConnection)
        self._stop.connect(worker.stop_server, Qt.ConnectionType.QueuedConnection)
        worker.server_state.connect(self._on_state)
        worker.served.connect(self._on_served)

    def start(self, host: str, port: int, api_key: str) -> None:
        """Serve the loaded pair with the window's drafting settings; the answer is ``state_changed``."""
        c = self.controller   # the settings keep what the Server tab shows (it reports each edit)
        self._start.emit(ServeRequest(host, port, api_key or None, c.settings.speculation(), c.drafter()))

    def stop(self) -> None:
        self._stop.emit()

    def _on_state(self, state: ServerState) -> None:
        self.url = state.url
        self.state_changed.emit(state)

    def _on_served(self, item: ServedEvents) -> None:
        if item.started is not None:
            self.live = LiveStats()
            self.live.add(item.started)
            self.request_started.emit()
            return
        if self.live is None:
            return
        if item.batch is not None:
            feed(self.live, item.batch)
            if time.monotonic() - self._updated_at >= UPDATE_S:
                self._updated_at = time.monotonic()
                self.request_updated.emit(self.live)
        elif item.summary is not None:
            self.live.add(item.summary)
            self.request_updated.emit(self.live)
            self.request_finished.emit(item.summary)
            self.live = None
        else:   # the request failed or its client left before it began
            self.live = None

"""The "Server" tab: switch the local OpenAI-compatible server on the loaded pair on and off.

The window's engine serves both its own chat and the server's clients, one answer at a time; the
speculation panel shows the clients' answers too. Listening on anything but loopback needs an API key.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QFormLayout, QLabel, QLineEdit, QSpinBox, QVBoxLayout, QWidget)

from app.core.speculation.events import Summary
from app.server.run import is_loopback
from app.storage.settings import LIMITS, Settings

EXPOSURE_NOTE = ("Only this computer can connect. To let other machines in, listen on another address "
                 "and set an API key: clients then send 'Authorization: Bearer KEY'.")


class ServerPanel(QWidget):
    start_requested = Signal(str, int, str)   # host, port, API key ("" = none)
    stop_requested = Signal()
    settings_edited = Signal(str, int, str)   # host, port, API key, to keep in the settings

    def __init__(self, settings: Settings, parent=None):
        super().__init__(parent)
        self.url: str | None = None
        self.requests = 0
        self.switch = QCheckBox("Serve the loaded models (OpenAI API)")
        self.switch.toggled.connect(self._toggled)
        self.host = QLineEdit(settings.server_host)
        self.port = QSpinBox()
        self.port.setRange(*(int(v) for v in LIMITS["server_port"]))
        self.port.setValue(settings.server_port)
        self.api_key = QLineEdit(settings.server_api_key)
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("none (loopback only)")
        for editor in (self.host, self.api_key):
            editor.editingFinished.connect(self._edited)
        self.port.valueChanged.connect(lambda _value: self._edited())
        self.status = QLabel("Off")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = QLabel()
        self.note.setObjectName("hint")
        self.note.setWordWrap(True)
        self._build()
        self._show_exposure()

    def _build(self) -> None:
        form = QFormLayout()
        form.addRow("Address", self.host)
        form.addRow("Port", self.port)
        form.addRow("API key", self.api_key)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 12, 12, 12)
        layout.addWidget(self.switch)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.note)
        layout.addStretch(1)

    # --- from the user -------------------------------------------------------------------------

    def _toggled(self, on: bool) -> None:
        if on and self.url is None:
            problem = self.problem()
            if problem:
                self.show_stopped(problem)
                return
            self.status.setText("Starting…")
            self._set_editable(False)
            self.start_requested.emit(self.host.text().strip(), self.port.value(), self.api_key.text().strip())
        elif not on and self.url is not None:
            self.stop_requested.emit()

    def problem(self) -> str:
        """Why the server cannot start with what is typed; "" when it can."""
        host = self.host.text().strip()
        if not host:
            return "Type the address to listen on (127.0.0.1: this computer only)."
        if not is_loopback(host) and not self.api_key.text().strip():
            return f"Listening on {host} lets other machines use the models: set an API key first."
        return ""

    def _edited(self) -> None:
        if self.url is None:   # a refusal spoke of what was typed before: it no longer applies
            self.status.setText("Off")
        self._show_exposure()
        self.settings_edited.emit(self.host.text().strip(), self.port.value(), self.api_key.text().strip())

    def _show_exposure(self) -> None:
        host = self.host.text().strip()
        if not host or is_loopback(host):
            self.note.setText(EXPOSURE_NOTE)
        elif self.api_key.text().strip():
            self.note.setText(f"Machines that reach {host} can connect with the API key.")
        else:
            self.note.setText(f"Listening on {host} needs an API key: anyone who reaches the port could "
                              "use the models.")

    # --- from the worker -----------------------------------------------------------------------

    def show_serving(self, url: str) -> None:
        self.url = url
        self.requests = 0
        self._set_switch(True)
        self._set_editable(False)
        self._show_status()

    def show_stopped(self, message: str = "") -> None:
        self.url = None
        self._set_switch(False)
        self._set_editable(True)
        self.status.setText(message or "Off")

    def count_request(self, summary: Summary) -> None:
        self.requests += 1
        self._show_status()

    def _show_status(self) -> None:
        answered = f"{self.requests} request{'s' if self.requests != 1 else ''} answered"
        self.status.setText(f"Serving {self.url}/v1 · {answered}\n"
                            f"Chat in a browser: {self.url}/\n"
                            f"curl {self.url}/v1/chat/completions -H 'Content-Type: application/json' "
                            "-d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'")

    def _set_switch(self, on: bool) -> None:
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.blockSignals(False)

    def _set_editable(self, editable: bool) -> None:
        for editor in (self.host, self.port, self.api_key):
            editor.setEnabled(editable)

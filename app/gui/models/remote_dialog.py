"""Connect the window to an OpenAI-compatible server (llama-server, vLLM, another Quickdraft)
instead of local models: its URL, an optional API key and model name."""

from __future__ import annotations

from urllib.parse import urlsplit

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit,
                               QVBoxLayout, QWidget)

from app.gui.runtime.worker import RemoteRequest

HINT = ("llama-server started with a draft model (-md) and vLLM with a speculative_config report their "
        "drafting; the speculation panel shows it live. Other servers answer without those numbers.")


class RemoteDialog(QDialog):
    def __init__(self, recent: tuple[str, ...] = (), api_key: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Connect to a server")
        self.url = QComboBox()
        self.url.setEditable(True)
        self.url.addItems(list(recent))
        self.url.setCurrentText(recent[0] if recent else "http://127.0.0.1:8080")
        self.api_key = QLineEdit(api_key)
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("none")
        self.model = QLineEdit()
        self.model.setPlaceholderText("the first model the server lists")
        self.problem = QLabel()
        self.problem.setObjectName("error")
        self.problem.setWordWrap(True)
        hint = QLabel(HINT)
        hint.setObjectName("hint")
        hint.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Connect")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout()
        form.addRow("Server URL", self.url)
        form.addRow("API key", self.api_key)
        form.addRow("Model", self.model)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(hint)
        layout.addWidget(self.problem)
        layout.addWidget(buttons)
        self.setMinimumWidth(460)

    def accept(self) -> None:
        problem = url_problem(self.url.currentText())
        if problem:
            self.problem.setText(problem)
            return
        super().accept()

    def request(self) -> RemoteRequest:
        return RemoteRequest(self.url.currentText().strip(), self.api_key.text().strip() or None,
                             self.model.text().strip() or None)


def url_problem(url: str) -> str:
    """Why ``url`` cannot name a server; "" when it can."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "Type the server's address, such as http://127.0.0.1:8080 or https://gpu-box.example:8000."
    return ""

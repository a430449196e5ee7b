"""The Server tab and the remote-server dialog, as widgets: what they refuse and what they ask for."""

from __future__ import annotations

from dataclasses import replace

from app.core.speculation.events import Summary
from app.gui.models.remote_dialog import RemoteDialog, url_problem
from app.gui.panels.server_panel import ServerPanel
from app.storage.settings import Settings


def summary() -> Summary:
    return Summary(prompt_tokens=3, prompt_tokens_evaluated=3, generated_tokens=4, ttft_s=0.1, prompt_s=0.1,
                   generation_s=0.2, drafted=0, accepted=0, main_tokens=4, rounds=3, drafting_rounds=0,
                   draft_s=0.0, verify_s=0.2)


def test_another_address_without_a_key_is_refused_before_anything_starts(qtbot):
    panel = ServerPanel(replace(Settings(), server_host="0.0.0.0"))
    qtbot.addWidget(panel)
    asked = []
    panel.start_requested.connect(lambda *args: asked.append(args))
    panel.switch.setChecked(True)
    assert asked == []
    assert not panel.switch.isChecked()
    assert "API key" in panel.status.text()
    assert "needs an API key" in panel.note.text()

    panel.api_key.setText("secret")
    panel.switch.setChecked(True)
    assert asked == [("0.0.0.0", 8080, "secret")]


def test_serving_shows_the_url_a_curl_line_and_the_requests_answered(qtbot):
    panel = ServerPanel(Settings())
    qtbot.addWidget(panel)
    stops = []
    panel.stop_requested.connect(lambda: stops.append(True))
    panel.show_serving("http://127.0.0.1:8080")
    assert panel.switch.isChecked() and not panel.host.isEnabled()
    panel.count_request(summary())
    panel.count_request(summary())
    assert "Serving http://127.0.0.1:8080/v1 · 2 requests answered" in panel.status.text()
    assert "Chat in a browser: http://127.0.0.1:8080/\n" in panel.status.text()
    assert "curl http://127.0.0.1:8080/v1/chat/completions" in panel.status.text()

    panel.switch.setChecked(False)
    assert stops == [True]
    panel.show_stopped("The local server stopped: no model is loaded.")
    assert panel.host.isEnabled() and panel.url is None
    assert panel.status.text() == "The local server stopped: no model is loaded."


def test_edits_are_reported_for_the_settings(qtbot):
    panel = ServerPanel(Settings())
    qtbot.addWidget(panel)
    edits = []
    panel.settings_edited.connect(lambda *args: edits.append(args))
    panel.port.setValue(9090)
    assert edits[-1] == ("127.0.0.1", 9090, "")


def test_the_remote_dialog_refuses_what_is_not_a_server_address(qtbot):
    dialog = RemoteDialog(("http://gpu-box:8000",), api_key="k")
    qtbot.addWidget(dialog)
    assert dialog.request().url == "http://gpu-box:8000" and dialog.request().api_key == "k"
    dialog.url.setCurrentText("gpu-box:8000")
    dialog.accept()
    assert dialog.result() == 0 and "http://" in dialog.problem.text()
    dialog.url.setCurrentText("https://gpu-box:8000/v1")
    dialog.model.setText("qwen")
    dialog.accept()
    assert dialog.result() == 1
    assert dialog.request().model == "qwen" and url_problem("https://gpu-box:8000/v1") == ""

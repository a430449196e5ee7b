"""The window's "Local server" switch and remote servers in the window, as a user drives them: the
Server tab serves the loaded pair to HTTP clients (whose answers the speculation panel shows), and a
server chosen in the main picker answers the chat with its own speculation statistics."""

from __future__ import annotations

import socket
import threading

import httpx

from app.core.engine import Engine
from app.core.params import DrafterKind, ModelParams, SpeculationParams
from app.server.run import LocalServer
from app.server.slots import ThreadedJobs
from tests.gui.conftest import ANSWER_TIMEOUT_MS, send, wait_idle, wait_loaded

CHAT = {"messages": [{"role": "user", "content": "the cat is on the mat"}], "temperature": 0, "max_tokens": 12}


def test_the_server_tab_serves_the_loaded_pair_and_the_panel_shows_client_answers(qtbot, loaded_window):
    window = loaded_window
    panel = window.server_panel
    window.side_tabs.setCurrentIndex(window.side_tabs.count() - 1)
    panel.port.setValue(free_port())
    panel.switch.click()
    qtbot.waitUntil(lambda: panel.url is not None, timeout=10_000)
    assert panel.switch.isChecked() and "Serving http://127.0.0.1:" in panel.status.text()
    page = httpx.get(panel.url + "/", timeout=10)   # the chat page the panel names
    assert page.status_code == 200 and page.text.startswith("<!doctype html>")

    results = []
    client = threading.Thread(target=lambda: results.append(
        httpx.post(panel.url + "/v1/chat/completions", json=CHAT, timeout=60)))
    client.start()
    qtbot.waitUntil(lambda: panel.requests == 1, timeout=ANSWER_TIMEOUT_MS)
    client.join(30)
    timings = results[0].json()["timings"]
    assert window.stats_panel.values()["drafted"] == str(timings["draft_n"]) != "0"

    # the window's own chat keeps working while it serves
    assert send(window, "hello there")
    wait_idle(qtbot, window)
    assert window.controller.last_generation.live.summary.generated_tokens > 0

    panel.switch.click()
    qtbot.waitUntil(lambda: panel.url is None, timeout=10_000)
    assert not panel.switch.isChecked() and window.controller.settings.server_port == panel.port.value()


def test_a_server_in_the_picker_answers_the_chat_with_its_speculation(qtbot, make_window, gui_models):
    def load():
        return Engine.load(ModelParams(str(gui_models.main), n_ctx=2048, n_threads=1),
                           ModelParams(str(gui_models.same), n_ctx=2048, n_threads=1))

    jobs = ThreadedJobs(load, SpeculationParams(policy="fixed", draft_max=4), DrafterKind.MODEL)
    jobs.start()
    server = LocalServer(jobs, "127.0.0.1", 0)
    server.start()
    try:
        window = make_window(recent_remotes=(server.url,))
        bar = window.model_bar
        bar.set_main(server.url)
        assert bar.main_combo.currentText().endswith("(server)") and bar.draft_combo.count() == 1
        bar.request_load()
        wait_loaded(qtbot, window)
        assert window.controller.loaded.remote_url == server.url
        assert "at 127.0.0.1:" in bar.status.full_text

        assert send(window, "the cat is on the mat")
        wait_idle(qtbot, window)
        summary = window.controller.last_generation.live.summary
        assert summary.speculation_reported and summary.drafted > 0 and summary.accepted == summary.drafted
        assert window.stats_panel.values()["drafted"] == str(summary.drafted)
        assert window.controller.settings.recent_remotes[0] == server.url
    finally:
        server.stop()
        jobs.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

"""The window's engine thread serving HTTP clients ("Local server") and chatting through a remote
server: the worker on its own QThread, driven by queued signals as the window drives it."""

from __future__ import annotations

import threading

import httpx
import pytest
from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.events import Summary
from app.gui.runtime.worker import (EngineWorker, LoadRequest, RemoteRequest, ServeRequest,
                            ServerState)
from tests.gui.conftest import LOAD_TIMEOUT_MS

SPECULATION = SpeculationParams(policy="fixed", draft_max=4)
MESSAGES = ({"role": "user", "content": "the cat is on the mat"},)
CHAT = {"messages": list(MESSAGES), "temperature": 0, "max_tokens": 12}


class Inbox(QObject):
    """Receives a worker's signals on the GUI thread (queued), as the window does."""

    def __init__(self, worker: EngineWorker):
        super().__init__()
        self.items: dict[str, list] = {name: [] for name in ("loaded", "load_failed", "finished", "server_state",
                                                              "served")}
        for name in self.items:
            getattr(worker, name).connect(getattr(self, "on_" + name), Qt.ConnectionType.QueuedConnection)

    @Slot(object)
    def on_loaded(self, item) -> None:
        self.items["loaded"].append(item)

    @Slot(object)
    def on_load_failed(self, item) -> None:
        self.items["load_failed"].append(item)

    @Slot(object)
    def on_finished(self, item) -> None:
        self.items["finished"].append(item)

    @Slot(object)
    def on_server_state(self, item) -> None:
        self.items["server_state"].append(item)

    @Slot(object)
    def on_served(self, item) -> None:
        self.items["served"].append(item)

    def next(self, qtbot, name: str, timeout_ms: int = 60_000):
        """The next item of ``name`` not taken yet, waiting for it."""
        taken = self.__dict__.setdefault("_taken", {}).get(name, 0)
        qtbot.waitUntil(lambda: len(self.items[name]) > taken, timeout=timeout_ms)
        self._taken[name] = taken + 1
        return self.items[name][taken]


class Driver(QObject):
    load = Signal(object)
    connect_remote = Signal(object)
    generate = Signal(object)
    start_server = Signal(object)
    stop_server = Signal()
    finish = Signal()


@pytest.fixture
def worker(qtbot, gui_models):
    """An EngineWorker on its own thread with the tiny pair loaded (the draft has the main's weights)."""
    thread = QThread()
    worker = EngineWorker()
    worker.moveToThread(thread)
    driver = Driver()
    for name in ("load", "connect_remote", "generate", "start_server", "stop_server", "finish"):
        getattr(driver, name).connect(getattr(worker, name), Qt.ConnectionType.QueuedConnection)
    inbox = Inbox(worker)
    thread.start()
    driver.load.emit(LoadRequest(ModelParams(str(gui_models.main), n_ctx=2048, n_threads=1),
                                 ModelParams(str(gui_models.same), n_ctx=2048, n_threads=1)))
    inbox.next(qtbot, "loaded", LOAD_TIMEOUT_MS)
    worker.driver, worker.inbox = driver, inbox
    yield worker
    driver.finish.emit()
    thread.wait(30_000)


def serve(qtbot, worker, host="127.0.0.1", api_key=None) -> ServerState:
    worker.driver.start_server.emit(ServeRequest(host, 0, api_key, SPECULATION, DrafterKind.MODEL))
    return worker.inbox.next(qtbot, "server_state", 10_000)


def greedy_answer(main) -> str:
    engine = Engine.load(ModelParams(str(main), n_ctx=2048, n_threads=1))
    try:
        request = GenerationRequest(list(MESSAGES), sampling=SamplingParams(max_tokens=12), drafter=DrafterKind.NONE)
        return list(engine.generate(request))[-1].text
    finally:
        engine.close()


def post_chat(url: str, results: list) -> None:
    results.append(httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=60))


def test_the_window_engine_serves_http_clients_and_shows_their_answers(qtbot, worker, gui_models):
    state = serve(qtbot, worker)
    assert state.url and state.url.startswith("http://127.0.0.1:")
    served = worker.inbox.items["served"]
    results: list = []
    client = threading.Thread(target=post_chat, args=(state.url, results))
    client.start()
    qtbot.waitUntil(lambda: any(s.summary is not None for s in served), timeout=60_000)
    client.join(30)

    body = results[0].json()
    assert results[0].status_code == 200
    assert body["choices"][0]["message"]["content"] == greedy_answer(gui_models.main)
    assert body["timings"]["draft_n"] > 0 and body["timings"]["draft_n_accepted"] == body["timings"]["draft_n"]
    started = next(s.started for s in served if s.started is not None)
    summary = next(s.summary for s in served if s.summary is not None)
    assert started.prompt_tokens == body["usage"]["prompt_tokens"]
    assert summary.generated_tokens == body["usage"]["completion_tokens"]
    assert summary.drafted == body["timings"]["draft_n"]


def test_the_window_chats_while_serving_and_stopping_closes_the_port(qtbot, worker):
    state = serve(qtbot, worker)
    worker.driver.generate.emit(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=8),
                                                  speculation=SPECULATION, drafter=DrafterKind.MODEL))
    summary = worker.inbox.next(qtbot, "finished")
    assert isinstance(summary, Summary) and summary.generated_tokens > 0
    assert httpx.get(state.url + "/health", timeout=10).status_code == 200

    worker.driver.stop_server.emit()
    assert worker.inbox.next(qtbot, "server_state", 10_000).url is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(state.url + "/health", timeout=5)


def test_serving_on_another_address_without_a_key_is_refused_with_the_reason(qtbot, worker):
    state = serve(qtbot, worker, host="0.0.0.0")
    assert state.url is None
    assert "--api-key" in state.message or "API key" in state.message


def test_a_remote_server_becomes_the_window_engine(qtbot, worker, gui_models):
    state = serve(qtbot, worker)
    remote_thread = QThread()
    remote = EngineWorker()
    remote.moveToThread(remote_thread)
    driver = Driver()
    driver.connect_remote.connect(remote.connect_remote, Qt.ConnectionType.QueuedConnection)
    driver.generate.connect(remote.generate, Qt.ConnectionType.QueuedConnection)
    driver.finish.connect(remote.finish, Qt.ConnectionType.QueuedConnection)
    inbox = Inbox(remote)
    remote_thread.start()
    try:
        driver.connect_remote.emit(RemoteRequest(state.url))
        info = inbox.next(qtbot, "loaded", 10_000)
        assert info.remote_url == state.url and info.draft_path is None
        assert info.main_name.startswith("main at 127.0.0.1:")
        driver.generate.emit(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=12),
                                               speculation=SPECULATION, drafter=DrafterKind.NONE))
        summary = inbox.next(qtbot, "finished")
        assert summary.text == greedy_answer(gui_models.main)
        assert summary.speculation_reported and summary.drafted > 0
    finally:
        driver.finish.emit()
        remote_thread.wait(30_000)


def test_an_unreachable_remote_server_keeps_the_loaded_pair(qtbot, worker):
    worker.driver.connect_remote.emit(RemoteRequest("http://127.0.0.1:9"))
    failure = worker.inbox.next(qtbot, "load_failed", 20_000)
    assert failure.previous_kept
    assert "127.0.0.1:9" in failure.message


def test_loading_another_pair_while_serving_serves_the_new_one(qtbot, worker, gui_models):
    state = serve(qtbot, worker)
    assert httpx.get(state.url + "/v1/models", timeout=10).json()["data"][0]["id"] == "main"
    worker.driver.load.emit(LoadRequest(ModelParams(str(gui_models.other), n_ctx=2048, n_threads=1), None))
    worker.inbox.next(qtbot, "loaded", LOAD_TIMEOUT_MS)
    assert httpx.get(state.url + "/v1/models", timeout=10).json()["data"][0]["id"] == "other"
    answer = httpx.post(state.url + "/v1/chat/completions", json=dict(CHAT, model="other"), timeout=60)
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] > 0
